"""How gemini is started with our hooks: a settings layer of its own, beside the person's.

Gemini CLI merges four settings files — system defaults, the user's
(``~/.gemini/settings.json``), the workspace's, the system's — and the ``hooks`` of every
event **concatenate** across them (``docs/gemini-cli.md``, "Settings"). So our hooks go in
the lowest layer, the system defaults, named by ``GEMINI_CLI_SYSTEM_DEFAULTS_PATH``: the
person's own settings and hooks, in every other file, stay as they are and win over any
key ours holds; our file carries the system defaults file gemini would have read (the
variable's, or the one beside the system settings), with our hook appended to each event
the mapping reads (:data:`~codex_presence.core.gemini.protocol.HOOK_EVENTS`).

gemini reads such a file only where the file and every directory above it are owned by
root and writable by nobody else (measured: under ``/tmp``, or owned by another uid, it is
skipped with a warning): :func:`secure_base` finds such a directory for the session's
private one, or None (a runner that is not root: the hooks cannot be registered this
way, and the session runs unobserved, said once).

The hook itself is our poster (:mod:`codex_presence.core.hooks.poster`): gemini runs every
hook synchronously and names it in its spinner, so it must cost little (a bash script
with ``/dev/tcp``, no curl) and print nothing (gemini reads a hook's stdout as its
answer: empty is "go on"). Its name, shown in gemini's spinner while it runs, is
:data:`HOOK_NAME`.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from codex_presence.core.gemini.protocol import HOOK_EVENTS
from codex_presence.core.hooks.poster import POST_TIMEOUT, poster_script, script_command

__all__ = [
    "DEFAULTS_ENV",
    "HOOK_NAME",
    "SettingsError",
    "defaults_path",
    "secure_base",
    "their_defaults",
    "with_our_hooks",
]

DEFAULTS_ENV = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"
"""The variable that names gemini's system defaults file (its lowest settings layer)."""
_SYSTEM_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
_SYSTEM_DEFAULT = "/etc/gemini-cli/settings.json"

HOOK_NAME = "presence"
"""Our hook's name: what gemini's spinner shows while it runs."""

_MAX_SETTINGS = 4 * 1024 * 1024


class SettingsError(Exception):
    """The system defaults file gemini would read cannot be carried into ours."""


def defaults_path(env: Mapping[str, str]) -> Path:
    """The system defaults file gemini reads in ``env``: the variable's, else
    ``system-defaults.json`` beside the system settings file."""
    given = env.get(DEFAULTS_ENV)
    if given:
        return Path(given)
    return Path(env.get(_SYSTEM_ENV) or _SYSTEM_DEFAULT).parent / "system-defaults.json"


def secure_base(candidates: tuple[str, ...] = ()) -> Path | None:
    """A directory that gemini trusts a settings file under (it and every one above it
    owned by root, writable by no group or other), where we can make ours: the first of
    ``candidates``, else of ``$XDG_RUNTIME_DIR``, ``/run``, ``~/.cache``. None when we are
    not root (no directory of ours can be root's)."""
    if os.geteuid() != 0:
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    home_cache = str(Path.home() / ".cache")
    for candidate in (*candidates, runtime, "/run", home_cache):
        if candidate and _trusted(Path(candidate)):
            return Path(candidate)
    return None


def _trusted(directory: Path) -> bool:
    try:
        path = directory.resolve(strict=True)
    except OSError:
        return False
    for each in (path, *path.parents):
        try:
            info = each.stat()
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


def their_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """The document of the system defaults file gemini would read in ``env`` ({} where
    there is none), for our layer to carry. Raises :class:`SettingsError`."""
    path = defaults_path(env)
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_SETTINGS + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"cannot read gemini's system defaults {path}: {exc.strerror}") from exc
    if len(data) > _MAX_SETTINGS:
        raise SettingsError(f"gemini's system defaults {path} are over 4 MiB")
    try:
        document = orjson.loads(data) if data.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise SettingsError(f"gemini's system defaults {path} are not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise SettingsError(f"gemini's system defaults {path} are not a JSON object")
    return document


def _write_private(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def with_our_hooks(
    url: str, *, private: Path, env: Mapping[str, str], defaults: Mapping[str, Any]
) -> dict[str, str]:
    """Write our settings layer into ``private`` (a trusted directory: see
    :func:`secure_base`): ``defaults`` (:func:`their_defaults`) with one hook per event
    POSTing to ``url``; the variables to add to gemini's environment. Raises OSError."""
    document = dict(defaults)
    bash = shutil.which("bash", path=env.get("PATH")) or "/bin/bash"
    cat = shutil.which("cat", path=env.get("PATH")) or "/bin/cat"
    script = _write_private(private, "poster.sh", poster_script(url, cat=cat).encode())
    hook = {
        "name": HOOK_NAME,
        "type": "command",
        "command": script_command(bash, str(script)),
        "timeout": POST_TIMEOUT * 1000,
    }
    hooks = document.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    for event in HOOK_EVENTS:
        theirs = hooks.get(event)
        hooks[event] = [
            *(theirs if isinstance(theirs, list) else []),
            {"matcher": "*", "hooks": [hook]},
        ]
    document["hooks"] = hooks
    layer = _write_private(private, "system-defaults.json", orjson.dumps(document))
    return {DEFAULTS_ENV: str(layer)}
