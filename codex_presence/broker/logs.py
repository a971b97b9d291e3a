"""The broker's log: uvicorn's words through the broker's handler, and no flood.

Left alone, uvicorn's loggers have no handler, so their warnings reach stderr through
:data:`logging.lastResort`: past ``--log-file``, past ``-q``, one line per malformed
request (1.3 MB in 10 s from one client). :func:`route_server_logs` sends them through the
broker's own handler, at the broker's level, and:

* what a client's bad request makes uvicorn say (a malformed request, an upgrade it
  cannot do) is demoted to INFO: the client got its 400, and ``-q`` ("warnings and errors
  only") means warnings about the broker, not about its clients;
* every message is escaped (:func:`~codex_presence._wire.printable`): whatever a client
  or the team file put in it, no escape sequence or line break reaches the terminal;
* :class:`RepeatLimit` lets each message through ``burst`` times per ``window`` seconds,
  then counts it: the last one let through says so, and the first one after the window
  says how many were not logged. It applies from INFO up, to uvicorn's records and the
  broker's alike (DEBUG and ``-vv``'s access log are what was asked for, and pass);
* the access log (``-vv``) shows a web session's key, which ``EventSource`` has to send in
  the query of ``/subscribe``, as ``key=…``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from codex_presence._wire import printable

__all__ = ["RepeatLimit", "route_server_logs"]

_CLIENT_NOISE = (
    "Invalid HTTP request received.",
    "Unsupported upgrade request.",
    "No supported WebSocket library detected.",
)
"""How uvicorn's warnings about a client's request begin."""


@dataclass(slots=True)
class _Tally:
    until: float
    logged: int = 0
    dropped: int = 0


class RepeatLimit(logging.Filter):
    """A handler filter: each message (by logger and format string) at most ``burst``
    times per ``window`` seconds; the rest are counted, and the count is logged."""

    def __init__(
        self,
        *,
        burst: int = 5,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._clock = clock
        self._tallies: dict[tuple[str, str], _Tally] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO or record.name == "uvicorn.access":
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        tally = self._tallies.get(key)
        if tally is None or now >= tally.until:
            dropped = tally.dropped if tally is not None else 0
            tally = self._tallies[key] = _Tally(until=now + self.window)
            if dropped:
                _note(record, f"{dropped} more like this in the last {self.window:g} s not logged")
        tally.logged += 1
        if tally.logged > self.burst:
            tally.dropped += 1
            return False
        if tally.logged == self.burst:
            _note(record, f"more like this in the next {self.window:g} s are counted, not logged")
        return True


def _note(record: logging.LogRecord, note: str) -> None:
    record.msg = f"{record.msg} ({note})"


def _demote_client_noise(record: logging.LogRecord) -> bool:
    if record.levelno == logging.WARNING and str(record.msg).startswith(_CLIENT_NOISE):
        record.levelno, record.levelname = logging.INFO, "INFO"
    return True


def _escape(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    escaped = printable(message)
    if escaped != message:
        record.msg, record.args = escaped, None
    return True


_KEY_IN_QUERY = re.compile(r"([?&]key=)[^&\s]*")


def _redact_keys(record: logging.LogRecord) -> bool:
    """``-vv``'s access log shows each request's query: not a web session's key."""
    if isinstance(record.args, tuple) and len(record.args) > 2:
        args = list(record.args)
        args[2] = _KEY_IN_QUERY.sub(r"\1…", str(args[2]))
        record.args = tuple(args)
    return True


def route_server_logs(handler: logging.Handler, *, level: int) -> None:
    """Send uvicorn's records to ``handler`` (the broker's), which lets through ``level``
    and up, escaped, repeats limited; a client's bad request is INFO."""
    handler.setLevel(level)
    handler.addFilter(RepeatLimit())
    handler.addFilter(_escape)
    server = logging.getLogger("uvicorn")
    server.handlers[:] = [handler]
    server.propagate = False
    logging.getLogger("uvicorn.error").addFilter(_demote_client_noise)
    logging.getLogger("uvicorn.access").addFilter(_redact_keys)
