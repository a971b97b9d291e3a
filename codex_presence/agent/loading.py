"""Loading a session's modules behind the agent's start (issues 27 and 34).

A runner spawns its agent (the codex TUI, Claude Code) with the standard library alone,
then loads what the session needs (anyio, the mapping, the server or relay, the broker
link) while the agent starts: :func:`load_behind` gives that loading the lowest priority
where it weighs only against the agent's own start. Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded before the agent runs
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["autogrouped", "load_behind"]

_AUTOGROUP = "/proc/sys/kernel/sched_autogroup_enabled"


def load_behind(modules: Sequence[str], *, yield_cpu: bool = True) -> None:
    """Import ``modules`` (a session's: anyio, its mapping, its server or relay; a few
    hundred milliseconds of CPU), yielding the CPU to the agent's own start where that
    is safe: in a thread of the lowest priority, when the kernel groups CPU time by session
    (Linux's autogroup), where a thread's priority weighs only against the other threads of
    its session (the agent's, spawned in ours), not against the rest of the machine.
    Without autogroup a low priority could starve the loading behind any busy process, and
    with it the server the agent waits for: the thread keeps ours. ``yield_cpu=False``:
    ours always, where what the agent sends cannot wait for the end of its start (claude's
    hook posters give up after 2 s). Returns once all are loaded; a module that fails is
    left for the caller's own import to raise."""
    import importlib
    import threading

    def load() -> None:
        try:
            if yield_cpu and autogrouped():
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            for name in modules:
                importlib.import_module(name)
        except BaseException:  # the caller's own import raises it again, on our log
            pass

    thread = threading.Thread(target=load, name="codex-presence-load", daemon=True)
    thread.start()
    thread.join()


def autogrouped() -> bool:
    """Whether the kernel groups CPU time by session (Linux's autogroup)."""
    try:
        with open(_AUTOGROUP, "rb") as flag:
            return flag.read(1) == b"1"
    except OSError:
        return False
