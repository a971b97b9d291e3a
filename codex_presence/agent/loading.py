"""Loading a session's modules behind the agent's start (issues 27 and 34).

A runner spawns its agent (the codex TUI, Claude Code) with the standard library alone,
then loads what the session needs (anyio, the mapping, the server or relay, the broker
link) while the agent starts: :func:`load_behind` gives that loading a lower priority
(:data:`LOADING_NICE`) where it weighs only against the agent's own start. Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded before the agent runs
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["LOADING_NICE", "autogrouped", "load_behind"]

_AUTOGROUP = "/proc/sys/kernel/sched_autogroup_enabled"

LOADING_NICE = 5
"""The loading thread's nice value where it yields. Within the session the scheduler
shares a CPU by weight (nice 0: 1024, 5: 335, 19: 15): beside the agent's start alone the
loading takes a quarter of a shared CPU and the agent the rest. Not 19: a busy job in the
same session (a build started from the same terminal) left a nice-19 loading 0.4 % of a
CPU, and the runner, which the codex TUI waits for, took 53-62 s to load beside four busy
loops (0.3-1.0 s alone); at 5, a few seconds. An unprivileged thread cannot raise its
priority again, so the value is chosen once."""


def load_behind(modules: Sequence[str], *, yield_cpu: bool = True) -> None:
    """Import ``modules`` (a session's: anyio, its mapping, its server or relay; a few
    hundred milliseconds of CPU), yielding the CPU to the agent's own start where that
    is safe: in a thread of a lower priority (:data:`LOADING_NICE`), when the kernel
    groups CPU time by session (Linux's autogroup), where a thread's priority weighs only
    against the other threads of its session (the agent's, spawned in ours), not against
    the rest of the machine.
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
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOADING_NICE)
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
