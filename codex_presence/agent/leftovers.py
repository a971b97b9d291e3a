"""The private directories a session makes in the temporary directory, named after the
process that owns them, and the sweep of those whose owner is gone.

``codex-presence claude`` (its settings file) and ``codex-presence codex`` (its sockets)
each make a 0700 directory and remove it at their end; a SIGKILL leaves it behind, in
``/tmp``, for good. So the owner's pid is in the name (``PREFIX<pid>-<random>``), and every
start sweeps the ones of the same prefix, in the same base, that are ours to sweep:

* a directory (never a symlink), owned by our uid: another user's are not ours to judge;
* its pid is not ours, and no such process runs (``kill(pid, 0)`` says ESRCH): a live
  session's directory is never touched, however old. A pid taken again by an unrelated
  process keeps its directory until that one ends too: too careful, never wrong.

A name without a pid (made by an older version) is left alone: its owner cannot be told.

A directory is made only in a base whose whole chain, from the base (its real path) up to
``/``, is ours or root's, and which nobody else can write to unless it is sticky (as
``/tmp``): in a ``$TMPDIR`` that another user owns or can write, they could swap our
directory between its creation and its use (claude runs the hook poster we write there:
code run as us). Such a base is refused (:func:`unsafe_base`) and the next one tried
(:func:`temporary_bases`, in :func:`tempfile.gettempdir`'s order).

Standard library only, and no logging until there is something to say: ``codex`` makes its
sockets' directory before it spawns the TUI (:func:`new_owned_directory`: ``os`` alone, not
even :mod:`pathlib` or :mod:`tempfile`), and sweeps once the TUI runs.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # typing is not loaded before the TUI's spawn
if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "make_owned_directory",
    "new_owned_directory",
    "owned_directory",
    "owner_alive",
    "sweep_leftovers",
    "temporary_bases",
    "unsafe_base",
]

_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"
"""The random part of a directory's name is drawn from these (:mod:`tempfile`'s)."""
_ATTEMPTS = 100


def temporary_bases() -> list[str]:
    """Where :func:`tempfile.gettempdir` would look, in its order (without loading it):
    ``$TMPDIR``, ``$TEMP``, ``$TMP``, then /tmp, /var/tmp and /usr/tmp."""
    named = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    return list(dict.fromkeys([base for base in named if base] + ["/tmp", "/var/tmp", "/usr/tmp"]))


def unsafe_base(base: str) -> str | None:
    """Why ``base`` cannot hold a private directory of ours, or None: each directory from
    its real path up to ``/`` must be ours or root's, and writable by nobody else unless
    sticky (see the module doc)."""
    from codex_presence.agent.descriptors import owner_name

    uid = os.geteuid()
    path = os.path.realpath(base)
    while True:
        try:
            info = os.stat(path)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
        if info.st_uid not in (uid, 0):
            return f"{path} belongs to {owner_name(info.st_uid)}"
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return f"{path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def new_owned_directory(prefix: str, base: str) -> str:
    """A new 0700 directory ``<base>/<prefix><our pid>-<8 random characters>`` (no sweep),
    as :func:`tempfile.mkdtemp` makes it, with ``os`` alone, in a base that is safe for it
    (:func:`unsafe_base`: PermissionError saying why not). Raises OSError."""
    import errno

    why = unsafe_base(base)
    if why is not None:
        raise PermissionError(errno.EPERM, f"not a place for a private directory: {why}", base)
    real = os.path.realpath(base)
    for _ in range(_ATTEMPTS):
        suffix = "".join(_NAME_CHARACTERS[b % len(_NAME_CHARACTERS)] for b in os.urandom(8))
        path = os.path.join(real, f"{prefix}{os.getpid()}-{suffix}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{base}: no free name for {prefix}{os.getpid()}-*")


def make_owned_directory(prefix: str, base: str | None = None, *, sweep: bool = True) -> Path:
    """A new 0700 directory ``<base>/<prefix><our pid>-<random>``, in ``base`` or else the
    first of :func:`temporary_bases` that is safe for it (:func:`owned_directory`), then the
    leftovers of ``prefix`` beside it swept (``sweep=False``: the caller sweeps later, off
    its start). Raises OSError saying why each base failed."""
    from pathlib import Path

    made = Path(owned_directory(prefix, base))
    if sweep:
        sweep_leftovers(prefix, str(made.parent))
    return made


def owned_directory(prefix: str, base: str | None = None) -> str:
    """:func:`make_owned_directory` without the sweep, its path a string: with ``os``
    alone, for claude's runner before claude's spawn (issue 34: :mod:`pathlib` loads
    ``urllib.parse`` and ``ipaddress``). Raises OSError saying why each base failed."""
    why: list[str] = []
    for candidate in [base] if base is not None else temporary_bases():
        try:
            return new_owned_directory(prefix, candidate)
        except OSError as exc:
            why.append(f"{candidate}: {exc.strerror or exc}")
    raise OSError(f"no private directory ({'; '.join(why)})")


def sweep_leftovers(prefix: str, base: str | None = None) -> list[Path]:
    """Remove the directories of ``prefix`` in ``base`` whose owner is gone (see the module
    doc); the ones removed. Never raises: a sweep that cannot be done is not our start's
    business."""
    import shutil
    import tempfile
    from pathlib import Path

    base_dir = Path(base if base is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base_dir))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        pid = _owner_pid(entry.name, prefix)
        if pid is None or pid == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or owner_alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    if removed:
        import logging

        logging.getLogger("codex_presence.agent").debug(
            "removed %d directories left by sessions that were killed: %s",
            len(removed),
            ", ".join(p.name for p in removed),
        )
    return removed


def _owner_pid(name: str, prefix: str) -> int | None:
    if not name.startswith(prefix):
        return None
    digits, dash, rest = name[len(prefix) :].partition("-")
    if not (digits.isdigit() and dash and rest) or len(digits) > 10:
        return None
    return int(digits) or None


def owner_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (as any user)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # running, as another user
    except (ProcessLookupError, OverflowError):
        return False
    return True
