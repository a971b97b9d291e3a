"""apprise behind one adapter: checking a target URL, masking it, sending one notice.

apprise (PyPI ``apprise``, the ``notify`` extra) turns one URL per service into a client
for it; this module is the only one that imports it (an import-linter contract says so), and
only once a target is configured: importing it and loading its plugins takes longer than
the rest of the broker's start (docs/notifications.md has the figures).

Secrets. A target URL carries secrets, and apprise logs them: its plugins log the URL they
post to (a Slack webhook's tokens are its path) at debug level, and their failures at
warning level. None of that may reach our log at any verbosity, so apprise's logger (and
urllib3's, which names the paths it retries) stop at :class:`_Capture`: nothing propagates,
and the one line that says why a send failed is kept, with every piece of the URL that
apprise's own privacy rendering masks replaced by ``***`` (:func:`scrub`), for our log line.

apprise is blocking (requests): :meth:`AppriseSender.send` runs in a worker thread, with
apprise's own connect and read timeouts set to the notifier's. A read timeout bounds each
read, not the answer: a target that trickles a byte every few seconds held its thread for
good (1 to 15 threads in 180 s). So each send has a deadline (:class:`_Deadline`): the
connections it opened (urllib3's, which requests uses, followed through
:func:`_follow_connections`) are shut down when its timeout is up, the blocked read returns,
and the thread is free; it never outlives the timeout by more than a read's return. Its
per-plugin throttle (a sleep between two sends of one plugin object) never applies: each
send builds its plugin afresh, and the notifier paces its retries.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from contextlib import suppress
from typing import Any
from urllib.parse import unquote

import apprise

__all__ = ["AppriseSender", "scrub", "secret_parts"]

_KINDS = {
    "info": apprise.NotifyType.INFO,
    "success": apprise.NotifyType.SUCCESS,
    "failure": apprise.NotifyType.FAILURE,  # a session lost
}


def secret_parts(url: str, masked: str) -> list[str]:
    """The pieces of ``url`` (as written, and %-decoded) that ``masked`` (apprise's privacy
    rendering of it) does not show: its secrets, longest first."""
    pieces = {p for p in re.split(r"[/:@?&=#,+;\s]", url) if len(p) >= 3}
    pieces |= {unquote(p) for p in pieces}
    hidden = [p for p in pieces if p not in masked]
    return sorted(hidden, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class _Capture(logging.Handler):
    """Where apprise's (and urllib3's) log records end: the latest warning of the current
    thread's send is kept (scrubbed), everything else is dropped."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING or not hasattr(self.local, "secrets"):
            return
        try:
            text = record.getMessage()
        except Exception:  # a record apprise formats badly must not break the send
            return
        self.local.reason = scrub(text, self.local.secrets)[:300]


_capture = _Capture()


class _Deadline:
    """The connections one send opened, shut down once its time is up (:meth:`expire`,
    run by a timer): whatever read waits on them returns at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if not self.expired:
                return
        _shut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):  # closed already (its descriptor is -1: nothing else's)
        sock.shutdown(socket.SHUT_RDWR)


_sending = threading.local()
"""The current thread's send: its :class:`_Deadline`, while it runs."""


def _follow_connections() -> None:
    """Have every connection urllib3 opens in a send join that send's deadline: its
    ``connect`` (plain and TLS) wrapped once, the socket it made (a TLS one included) then
    known to the send. A connection opened outside a send is left alone."""
    from urllib3.connection import HTTPConnection, HTTPSConnection

    for cls in (HTTPConnection, HTTPSConnection):
        original = vars(cls)["connect"]
        if getattr(original, "_follows_deadline", False):
            continue

        def connect(self: Any, _original: Any = original) -> None:
            _original(self)
            deadline = getattr(_sending, "deadline", None)
            if deadline is not None and self.sock is not None:
                deadline.add(self.sock)

        connect._follows_deadline = True  # type: ignore[attr-defined]
        cls.connect = connect  # type: ignore[method-assign]


def _silence_library_logs() -> None:
    for name in ("apprise", "urllib3"):
        library = logging.getLogger(name)
        library.propagate = False
        if _capture not in library.handlers:
            library.addHandler(_capture)


_GENERIC_WEBHOOKS = frozenset({"json", "jsons", "form", "forms", "xml", "xmls"})
"""apprise's webhooks to any URL, whose path it shows as it is in a label."""


def _label(plugin: Any) -> str:
    """How a target is shown (see :meth:`AppriseSender.masked`)."""
    shown = str(plugin.url(privacy=True)).partition("?")[0]
    scheme, sep, rest = shown.partition("://")
    where, _, path = rest.partition("/")
    if scheme.lower() in _GENERIC_WEBHOOKS and path.strip("/"):
        return f"{scheme}{sep}{where}/***"
    return shown


class AppriseSender:
    """Checks, masks and sends to apprise URLs."""

    def __init__(self) -> None:
        _silence_library_logs()
        _follow_connections()

    def _plugin(self, url: str) -> Any:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        if plugin is None:
            raise ValueError(
                "not a notification URL apprise knows (see apprise's list of services)"
            )
        return plugin

    def masked(self, url: str) -> str:
        """``url`` as apprise shows it with its secrets masked, without its query (apprise
        spells out every default there), and without the path of a generic webhook
        (``json://``, ``form://``, ``xml://``: apprise shows it as it is, and a webhook's
        path is often its secret, ``/hooks/<token>``); :class:`ValueError` (which never
        quotes the URL) when apprise does not know it."""
        return _label(self._plugin(url))

    def send(self, url: str, title: str, body: str, kind: str, timeout: float) -> str | None:
        """Send one notification (blocking); None when it was delivered, else why not
        (no secret in it). ``kind``: "info", "success", "warning" or "failure"."""
        try:
            plugin = self._plugin(url)
        except ValueError as exc:
            return str(exc)
        secrets = secret_parts(url, _label(plugin))
        plugin.socket_connect_timeout = timeout
        plugin.socket_read_timeout = timeout
        local = _capture.local
        local.secrets, local.reason = secrets, None
        deadline = _sending.deadline = _Deadline()
        timer = threading.Timer(timeout, deadline.expire)
        timer.daemon = True
        timer.start()
        try:
            ok = plugin.notify(
                body=body, title=title, notify_type=_KINDS.get(kind, apprise.NotifyType.WARNING)
            )
        except Exception as exc:  # a plugin's bug: a failed send, never a dead worker
            return scrub(f"{type(exc).__name__}: {exc}", secrets)[:300]
        finally:
            timer.cancel()
            del _sending.deadline
            reason = local.reason
            del local.secrets
        if ok:
            return None
        if deadline.expired:
            return f"no whole answer within {timeout:g} s"
        return reason or "the service did not accept it"
