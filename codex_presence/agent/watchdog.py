"""The watchdog: a fork of ``wrap`` that owns the wrapped command's whole process tree.

Why a process of its own: when wrap is SIGKILLed nothing of wrap runs any more, and the
command's descendants may have left its process group and session (codex starts its
commands in sessions of their own), so neither ``PR_SET_PDEATHSIG`` (the command only) nor
a process-group kill reaches them. The watchdog is the command's parent and a *child
subreaper* (``PR_SET_CHILD_SUBREAPER``, no privileges needed): every orphan of the tree is
re-parented to it, so the whole tree stays below it, and it sees wrap's end as the end of
file on its lifeline pipe (the kernel closes wrap's end whatever killed wrap). It then
SIGKILLs every descendant, round after round until it has no child left, and exits.

It holds only the descriptors it needs, and ignores the terminal's signals (wrap forwards
them to the command). With the command, it lives in a process group of its own: a SIGKILL
aimed at wrap's group spares it, so that it can do its job (a terminal program, which must
stay in the terminal's foreground group, stays in ours, and so does its watchdog; should the
watchdog itself be killed, wrap kills the command's group when it hears of it). It starts the
command before anything else (its only import, ctypes for ``prctl``, comes after: the
command's start is what counts), never wakes up while nothing happens (``poll`` on the
lifeline and on a SIGCHLD wake-up pipe), and reports to wrap over its report pipe, one line
each: ``P <pid>`` once the command runs or ``E <errno>`` if it cannot, and ``X <wait
status>`` when it ends.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress

TYPE_CHECKING = False  # typing is not loaded before the child runs
if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["Plan", "descendants", "load_prctl", "proc_stat", "run"]

_PR_SET_CHILD_SUBREAPER = 36
_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_RESTORED = (signal.SIGPIPE, signal.SIGXFSZ)
"""Python ignores these; the command gets the default back, as :mod:`subprocess` does."""
_EVERY_SIGNAL = tuple(
    sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}, key=int)
)
"""Every signal whose disposition can be set: all back to their defaults, and none
blocked, for a command started in place of npm's codex launcher (:attr:`Plan.as_node`)."""

Prctl = Callable[[int, int, int, int, int], int]


class Plan:
    """What the watchdog is to run, and its descriptors (all inherited through the fork)."""

    __slots__ = (
        "as_node",
        "command",
        "death_signal",
        "env",
        "lifeline",
        "own_group",
        "own_session",
        "reports",
        "stderr",
        "stdin",
        "stdout",
    )

    def __init__(
        self,
        *,
        command: list[str],
        env: dict[str, str],
        stdin: int,
        stdout: int,
        stderr: int = 2,
        lifeline: int,
        reports: int,
        own_group: bool = True,
        own_session: bool = False,
        death_signal: int = signal.SIGKILL,
        as_node: bool = False,
    ) -> None:
        self.command = command
        self.as_node = as_node
        """The command runs in place of a node script that would have run it (npm's codex
        launcher): with every signal at its default and none blocked, as node leaves them
        (its start sets them so, and so does libuv's spawn), not as we inherited them."""
        self.stderr = stderr
        self.death_signal = death_signal
        """Sent to the command first when wrap ends (with a second's grace), unless it is
        SIGKILL; then the whole tree is killed."""
        self.own_group = own_group or own_session
        """The command gets a process group of its own (and so do we)."""
        self.own_session = own_session
        """The command's group is a session of its own (``setsid``): no controlling
        terminal, and where the kernel groups CPU time by session (autogroup), a share of
        its own, not the terminal's."""
        self.env = env
        self.stdin = stdin
        self.stdout = stdout
        self.lifeline = lifeline
        self.reports = reports


def load_prctl() -> Prctl | None:
    """libc's ``prctl``, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def run(plan: Plan) -> NoReturn:
    """The watchdog's life, in the forked process: start the command, watch, kill the
    tree, exit. Never returns, whatever happens."""
    try:
        _keep_only(plan.stdin, plan.stdout, plan.stderr, plan.lifeline, plan.reports)
        for signum in _TERMINAL_SIGNALS:
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, _ignore)  # a handler, not SIG_IGN: exec resets it
        if plan.own_group:  # a kill aimed at wrap's process group is not aimed at us
            os.setpgid(0, 0)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, _ignore)
        try:
            pid = _start(plan)
        except OSError as exc:
            _say(plan.reports, b"E %d\n" % (exc.errno or 0))
            os._exit(0)
        # The command first, its start being the one that counts, and said at once (wrap
        # waits for it to go on: the codex TUI's app-server is spawned next); then the
        # subreaper (a descendant orphaned later, however much later, is re-parented to
        # us), whose ctypes takes milliseconds to load.
        _say(plan.reports, b"P %d\n" % pid)
        prctl = load_prctl()
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for fd in {plan.stdin, plan.stdout, plan.stderr} - {2}:
            os.close(fd)
        if _watch(pid, plan, wake_r) and plan.death_signal != signal.SIGKILL:
            _ask_to_end(pid, plan, wake_r)
        _kill_tree()
    except BaseException as exc:  # never back into the caller's code: this is a fork
        with suppress(BaseException):
            os.write(2, f"codex-presence watchdog: {exc!r}\n".encode())
        with suppress(BaseException):
            _kill_tree()
    finally:
        os._exit(0)


def _ignore(signum: int, frame: object) -> None:
    """Wrap forwards the terminal's signals to the command; the watchdog stays."""


def _keep_only(*keep: int) -> None:
    """Close every descriptor but stderr and ``keep``; 0 and 1 become /dev/null (wrap's
    stdin and stdout are the client's, not ours to hold open)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        if fd not in keep:
            os.dup2(null, fd, inheritable=False)
    low = 3
    for fd in sorted(fd for fd in keep if fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))  # /dev/null's descriptor too


def _start(plan: Plan) -> int:
    """Start the command (in its own process group, unless ``plan.own_group`` is False; in
    its own session with ``plan.own_session``), ``plan.stdin``/``stdout``/``stderr`` as its
    0, 1 and 2, the signals Python ignores back to their defaults; OSError if it cannot be
    run. With ``posix_spawn`` (a vfork and an exec): a second fork of this Python process,
    its page tables copied, took milliseconds more before the command's start (issue 27).
    ``plan.command[0]`` is looked up on ``plan.env``'s ``PATH``, as ``execvpe`` does."""
    descriptors = [
        (os.POSIX_SPAWN_DUP2, plan.stdin, 0),
        (os.POSIX_SPAWN_DUP2, plan.stdout, 1),
        (os.POSIX_SPAWN_DUP2, plan.stderr, 2),
    ]
    # Its own session, or its own group (a group leader cannot setsid), or neither.
    if plan.own_group and not plan.own_session:
        placement: dict[str, Any] = {"setpgroup": 0}
    else:
        placement = {"setsid": plan.own_session}
    if plan.as_node:
        placement["setsigmask"] = ()  # none blocked: node's child has none blocked
    program = plan.command[0]
    if os.sep in program:
        candidates = [program]
    else:
        candidates = [os.path.join(d, program) for d in os.get_exec_path(plan.env)]
    # execvpe's search: each place in turn, the first error other than "not here" if none
    # runs. A place where nothing is (a stat) is passed over without a spawn: each spawn
    # that fails is a process made for nothing.
    last: OSError = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    saved: OSError | None = None
    for candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        try:
            return os.posix_spawn(
                candidate,
                plan.command,
                plan.env,
                file_actions=descriptors,
                setsigdef=_EVERY_SIGNAL if plan.as_node else _RESTORED,
                **placement,
            )
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            saved = saved or exc
    raise saved or last


def _say(fd: int, line: bytes) -> None:
    with suppress(OSError):  # wrap is gone: nobody to tell
        os.write(fd, line)


def _watch(pid: int, plan: Plan, wake_r: int) -> bool:
    """Reap (the command's end is reported; orphans of the tree are ours to reap too)
    until the lifeline ends; whether the command still runs then."""
    waiter = select.poll()
    waiter.register(plan.lifeline, select.POLLIN)
    waiter.register(wake_r, select.POLLIN)
    os.set_blocking(wake_r, False)
    running = True
    while True:
        running = _reap(pid, plan) and running
        if any(fd == plan.lifeline for fd, _ in waiter.poll()):
            return running and _reap(pid, plan)
        _drain(wake_r)


def _reap(pid: int, plan: Plan) -> bool:
    """Reap every child that ended (the command's end is reported); False once the command
    has ended."""
    running = True
    while True:
        try:
            ended, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if ended == 0:
            return running
        if ended == pid:
            running = False
            _say(plan.reports, b"X %d\n" % status)


def _drain(fd: int) -> None:
    with suppress(BlockingIOError):
        while os.read(fd, 256):
            pass


def _ask_to_end(pid: int, plan: Plan, wake_r: int, grace: float = 1.0) -> None:
    """Send the command ``plan.death_signal`` and give it ``grace`` seconds to end."""
    with suppress(ProcessLookupError, PermissionError):
        if plan.own_group:
            os.killpg(pid, plan.death_signal)
        else:
            os.kill(pid, plan.death_signal)
    deadline = time.monotonic() + grace
    waiter = select.poll()
    waiter.register(wake_r, select.POLLIN)
    while _reap(pid, plan) and (left := deadline - time.monotonic()) > 0:
        waiter.poll(left * 1000)
        _drain(wake_r)


def _kill_tree() -> None:
    """SIGKILL every descendant, round after round, until no child is left: a process
    forked meanwhile, or orphaned by a kill, is re-parented to us and found next round."""
    me = os.getpid()
    while True:
        for pid in descendants(me):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.002)  # the killed are still dying


def proc_stat(pid: int | str) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command's name (which may hold spaces and
    parentheses): ``[0]`` is the state (the file's field 3), ``[1]`` the parent's pid.
    Raises OSError (the process is gone) or IndexError (no such line)."""
    with open(f"/proc/{pid}/stat", "rb") as stat_file:
        return stat_file.read().rsplit(b")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (from /proc; Linux), children before grandchildren."""
    children: dict[int, list[int]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                parent = int(proc_stat(entry.name)[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(0), ()):
            found.append(child)
            todo.append(child)
    return found
