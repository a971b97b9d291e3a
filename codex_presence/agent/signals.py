"""What a shell does with the signals it gets, and the status it ends with.

Every shell passes SIGINT, SIGTERM and SIGHUP on to the agent it runs by one rule
(:class:`SignalForwarding`), ends with a shell's status for the agent's end
(:func:`exit_status`: 128 + N for signal N), and with 127 or 126 for a command that cannot
run (:func:`cannot_run`). Standard library only: ``wrap`` forwards from a plain signal
handler before anything else has loaded.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from codex_presence.agent.child import relay_log

TYPE_CHECKING = False  # typing is not loaded before the child's first bytes are copied
if TYPE_CHECKING:
    from codex_presence.agent.child import Child

__all__ = ["FORWARDED_SIGNALS", "SignalForwarding", "cannot_run", "exit_status"]

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What every shell passes on to the agent it runs: an interrupt, a termination, a hang-up."""


class SignalForwarding:
    """The one rule every shell follows for the signals it gets (:data:`FORWARDED_SIGNALS`).

    * Each is passed on to the agent's process (its whole group, when it has its own).
    * Except a SIGINT while the agent shares our process group and that group is the
      terminal's foreground: the terminal's Ctrl-C reached the agent itself, and a second
      copy would read as a second Ctrl-C (claude takes that as "exit").
    * The second SIGINT passed on kills the agent: a person who interrupts twice wants out,
      whatever the agent does with an interrupt (a first one it ignores, a prompt it shows).

    Standard library only: ``wrap`` forwards from a plain signal handler before anything
    else has loaded. Signals that come before there is a child wait for it."""

    def __init__(self, child: Child | None = None, *, name: str = "the child") -> None:
        self.name = name
        self.interrupts = 0
        """SIGINTs passed on so far."""
        self._child: Child | None = None
        self._early: list[signal.Signals] = []
        if child is not None:
            self.attach(child)

    def attach(self, child: Child) -> None:
        """The agent's process is there: the signals that came meanwhile reach it now."""
        self._child = child
        early, self._early = self._early, []
        for signum in early:
            self.forward(signum)

    def forward(self, signum: signal.Signals) -> None:
        child = self._child
        if child is None:
            self._early.append(signum)
            return
        if signum == signal.SIGINT:
            if not child.own_group and _foreground_of_our_terminal():
                relay_log("debug", "Ctrl-C: %s has it from the terminal", self.name)
                return
            self.interrupts += 1
            if self.interrupts > 1:
                relay_log("warning", "second interrupt: killing %s (pid %d)", self.name, child.pid)
                child.kill()
                return
        relay_log("debug", "forwarding %s to %s", signum.name, self.name)
        child.send_signal(signum)


def _foreground_of_our_terminal() -> bool:
    """Whether our process group is the foreground of the terminal on our stdin."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def cannot_run(command: Sequence[str], exc: OSError) -> int:
    """Say why ``command`` cannot be run; its exit status, as a shell has it (127 if it was
    not found, else 126)."""
    hint = None
    if isinstance(exc, FileNotFoundError):
        from codex_presence.core.clients import where_to_get  # the clients' words: now only

        hint = where_to_get(command[0])
    if hint is not None:
        said = f"not on PATH: {hint}"
        relay_log("error", "cannot run %s: %s (%s)", command[0], exc.strerror or exc, said)
    else:
        relay_log("error", "cannot run %s: %s", command[0], exc.strerror or exc)
    return 127 if isinstance(exc, FileNotFoundError) else 126


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: its code, or 128 + N for signal N."""
    return 128 - returncode if returncode < 0 else returncode
