"""A client's hooks back in the order it ran them: which deliveries come too late.

A hook-driven runner registers its hooks as *async* command hooks when its client can run
them so (a client that names every hook it waits for in its spinner waits for none of
these): the client starts one small process per hook, which POSTs the payload to the hook
server and is not waited for. Processes race, so two hooks fired a few milliseconds apart
(PreToolUse, then the PermissionRequest of the same tool 36 ms later; PostToolUse, then
PostToolBatch) can arrive the wrong way round. Each delivery carries its process id, which
the client's spawns hand out in the order it ran the hooks (Linux allocates them upwards,
wrapping at ``pid_max``).

The rule: a delivery whose sequence number is *older* than that of the newest one applied
is late, and dropped — every later hook of the client's flow supersedes what an earlier one
says (a PreToolUse after its own PostToolUse or PermissionRequest, a UserPromptSubmit after
its Stop, a PostToolUse after its PostToolBatch). Sequence numbers are compared only
between deliveries less than :data:`WINDOW` seconds apart: pids wrap, and beyond that a
number says nothing of the order. Deliveries without one (HTTP hooks) always apply.
Sans-I/O: the time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PID_MAX", "WINDOW", "HookOrder"]

PID_MAX = 4_194_304
"""Linux's largest ``pid_max`` (64-bit): the modulus when the real one is not known."""

WINDOW = 1.0
"""Seconds within which two deliveries' sequence numbers are compared: far above the
few milliseconds a delivery process takes, far below the time pids take to wrap."""


@dataclass(slots=True)
class HookOrder:
    """Admits hook deliveries in the client's order; see the module doc."""

    modulus: int = PID_MAX
    """Sequence numbers wrap at this (the system's ``pid_max``)."""
    window: float = WINDOW
    late: int = 0
    """Deliveries dropped as late."""
    _newest: int | None = None
    _newest_at: float = 0.0

    def admit(self, seq: int | None, now: float) -> bool:
        """Whether the delivery numbered ``seq`` (None: unnumbered), arriving at ``now``,
        is to be applied; False if a later hook of the client's has been applied already."""
        if seq is None:
            return True
        if self._newest is not None and now - self._newest_at < self.window:
            behind = (self._newest - seq) % self.modulus
            if 0 < behind < self.modulus // 2:
                self.late += 1
                return False
        self._newest, self._newest_at = seq, now
        return True
