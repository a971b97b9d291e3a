"""Holding the log while an interactive child draws on the terminal (``codex-presence codex``).

Apart from :mod:`codex_presence.cli.main` so that the command line's entry point imports no
``logging``: ``wrap`` spawns its child before it loads it.
"""

from __future__ import annotations

import logging
import sys
from collections import deque

__all__ = ["HeldLog", "hold_logging"]


class HeldLog(logging.Handler):
    """Holds the package's log records while an interactive child draws on the terminal
    (a line written there would break its screen), then writes them to stderr; the last
    ``capacity`` records are kept."""

    def __init__(self, capacity: int = 500) -> None:
        super().__init__()
        self.records: deque[logging.LogRecord] = deque(maxlen=capacity)
        self.dropped = 0
        self.setFormatter(logging.Formatter("codex-presence: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) == self.records.maxlen:
            self.dropped += 1
        self.records.append(record)

    def let_go(self) -> None:
        """Write what was held to stderr, and log there from now on. (Not ``release``:
        that is the handler's lock.)"""
        if self.dropped:
            sys.stderr.write(f"codex-presence: ({self.dropped} earlier log lines dropped)\n")
        for record in self.records:
            sys.stderr.write(self.format(record) + "\n")
        self.records.clear()
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(self.formatter)
        logging.getLogger("codex_presence").handlers[:] = [handler]


def hold_logging(*, verbose: int = 0, quiet: bool = False) -> HeldLog:
    """Log into a :class:`HeldLog`: warnings and errors, ``-v`` adds info (the
    transitions), ``-vv`` debug."""
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    held = HeldLog()
    root = logging.getLogger("codex_presence")
    root.handlers[:] = [held]
    root.setLevel(logging.WARNING if quiet else level)
    root.propagate = False
    return held
