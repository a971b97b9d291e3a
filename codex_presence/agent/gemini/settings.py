"""How gemini is started with our hooks: a shadow of the person's gemini home, as any user.

gemini reads the person's settings from ``$GEMINI_CLI_HOME/.gemini/settings.json``
(``GEMINI_CLI_HOME`` defaults to ``HOME``), and every other file of its home (chats,
history, projects, trust) from that ``.gemini`` too. Its only other place for settings a
runner could add, the system defaults file, it reads only under directories owned by root
(``docs/gemini-cli.md``, "Settings"): a person's runner cannot use it. So the session gets
a **shadow home** (:class:`ShadowHome`), in its private 0700 directory:

* ``.gemini/settings.json`` is the person's settings with our hook appended to each event
  the mapping reads (:func:`~codex_presence.core.gemini.protocol.with_hooks`): their own
  settings and hooks stay, and run before ours. Their file may hold comments (gemini
  strips them, and so does :func:`parse_settings`).
* every other entry of the person's ``.gemini`` is a symlink to it, and the directories
  gemini would create on a first run (:data:`MADE_AHEAD`) are made in the person's
  ``.gemini`` first, so chats and history land there while the session runs: ``gemini
  --resume`` finds them after it.
* at the end (:meth:`ShadowHome.give_back`), what gemini left in the shadow comes home: a
  setting the person changed in the session (``/model``, ``/settings``, ``/theme``) is
  written into their own ``settings.json`` as it is then (only the keys that changed, our
  hooks never); a file or directory gemini made in the shadow (a new entry, or one it
  replaced by a rename) is moved into their ``.gemini``. Their ``settings.json`` with
  comments is not rewritten (it would lose them): the changes are named in a warning.

The hook itself is our poster (:mod:`codex_presence.core.hooks.poster`): gemini runs every
hook synchronously and names it in its spinner, so it must cost little (a bash script, no
curl) and print nothing (gemini reads a hook's stdout as its answer: empty is "go on"). On
Linux it writes the hook into the session's private spool, which no other user can reach
(:mod:`codex_presence.agent.hooks.spool`), and exits; elsewhere it POSTs it to the loopback
hook server through ``/dev/tcp``.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from codex_presence.core.gemini.protocol import hook_settings, with_hooks
from codex_presence.core.hooks.poster import poster_script, script_command, spool_script

__all__ = [
    "HOME_ENV",
    "MADE_AHEAD",
    "SettingsError",
    "ShadowHome",
    "parse_settings",
    "their_gemini_dir",
    "their_settings",
]

logger = logging.getLogger("codex_presence.gemini")

HOME_ENV = "GEMINI_CLI_HOME"
"""The variable that moves gemini's home (``$GEMINI_CLI_HOME/.gemini``)."""
GEMINI_DIR = ".gemini"
SETTINGS = "settings.json"
MADE_AHEAD = ("tmp", "history")
"""Directories gemini creates in its home when they are missing (its chats, its per-project
history): made in the person's ``.gemini`` before the session, so nothing of theirs is
written into the shadow."""

_MAX_SETTINGS = 4 * 1024 * 1024


class SettingsError(Exception):
    """The person's gemini settings cannot be read into the shadow home."""


def _strip_comments(text: str) -> str:
    """``text`` without its ``//`` and ``/* */`` comments outside strings, as gemini reads
    its settings files (``strip-json-comments``)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_settings(data: bytes, where: str) -> tuple[dict[str, Any], bool]:
    """A settings file's document (comments allowed, as gemini reads it) and whether it was
    plain JSON. Raises :class:`SettingsError` naming ``where``."""
    if not data.strip():
        return {}, True
    try:
        document = orjson.loads(data)
        plain = True
    except orjson.JSONDecodeError:
        plain = False
        try:
            document = orjson.loads(_strip_comments(data.decode("utf-8")))
        except (UnicodeDecodeError, orjson.JSONDecodeError) as exc:
            raise SettingsError(f"gemini's settings {where} are not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise SettingsError(f"gemini's settings {where} are not a JSON object")
    return document, plain


def _read(path: Path) -> bytes | None:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_SETTINGS + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(f"cannot read gemini's settings {path}: {exc.strerror}") from exc
    if len(data) > _MAX_SETTINGS:
        raise SettingsError(f"gemini's settings {path} are over 4 MiB")
    return data


def _write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _changes(
    before: Any, after: Any, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """Where ``after`` differs from ``before``: ``(key path, new value)``, a missing key's
    value being :data:`_GONE`; objects compared key by key."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[tuple[tuple[str, ...], Any]] = []
        for key in before.keys() | after.keys():
            out += _changes(before.get(key, _GONE), after.get(key, _GONE), (*path, key))
        return out
    return [] if before == after else [(path, after)]


_GONE = object()


def _apply(document: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]]) -> None:
    for path, value in changes:
        target = document
        for key in path[:-1]:
            inner = target.get(key)
            if not isinstance(inner, dict):
                inner = target[key] = {}
            target = inner
        if value is _GONE:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value


def their_gemini_dir(env: Mapping[str, str]) -> Path:
    """The person's ``.gemini`` in ``env``: under ``GEMINI_CLI_HOME``, else ``HOME``."""
    return Path(env.get(HOME_ENV) or env.get("HOME") or Path.home()) / GEMINI_DIR


def their_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The person's settings document in ``env`` ({} when they have none). Raises
    :class:`SettingsError`."""
    path = their_gemini_dir(env) / SETTINGS
    data = _read(path)
    return {} if data is None else parse_settings(data, str(path))[0]


class ShadowHome:
    """The shadow gemini home of one session, in ``private`` (see the module doc)."""

    def __init__(self, private: Path, env: Mapping[str, str]) -> None:
        self.root = private
        self.shadow = private / GEMINI_DIR
        self.theirs = their_gemini_dir(env)
        self._written: dict[str, Any] = {}
        self._ours: dict[str, Any] = {}
        self._their_events: frozenset[str] = frozenset()

    def make(
        self, url: str | None, env: Mapping[str, str], *, spool: Path | None = None
    ) -> dict[str, str]:
        """Build the shadow with our hooks written into ``spool`` (a directory in the
        private one: :mod:`codex_presence.agent.hooks.spool`) if given, else POSTed to
        ``url``; the variables to add to gemini's environment. Raises
        :class:`SettingsError`, OSError."""
        settings = their_settings(env)
        self.theirs.mkdir(parents=True, exist_ok=True)
        for name in MADE_AHEAD:
            (self.theirs / name).mkdir(exist_ok=True)
        self.shadow.mkdir(mode=0o700)
        for entry in os.scandir(self.theirs):
            if entry.name != SETTINGS:
                (self.shadow / entry.name).symlink_to(self.theirs / entry.name)
        bash = shutil.which("bash", path=env.get("PATH")) or "/bin/bash"
        cat = shutil.which("cat", path=env.get("PATH")) or "/bin/cat"
        if spool is not None:
            poster = spool_script(str(spool), cat=cat)
        elif url is not None:
            poster = poster_script(url, cat=cat)
        else:
            raise ValueError("hooks need a spool or a URL")
        script = _write_private(self.root / "poster.sh", poster.encode())
        self._ours = hook_settings(script_command(bash, str(script)))
        self._written = with_hooks(settings, self._ours)
        theirs = settings.get("hooks")
        self._their_events = frozenset(theirs) if isinstance(theirs, dict) else frozenset()
        _write_private(
            self.shadow / SETTINGS, orjson.dumps(self._written, option=orjson.OPT_INDENT_2)
        )
        # gemini's relaunch reads $GEMINI_CLI_HOME/settings.json (no .gemini) for its memory.
        (self.root / SETTINGS).symlink_to(self.shadow / SETTINGS)
        return {HOME_ENV: str(self.root)}

    def give_back(self) -> None:
        """Bring home what gemini left in the shadow (see the module doc). Never raises:
        what cannot be brought back is said in a warning."""
        if not self.shadow.is_dir():
            return
        try:
            self._give_back_settings()
        except (OSError, SettingsError) as exc:
            logger.warning("a setting changed in the session was not saved: %s", exc)
        for entry in os.scandir(self.shadow):
            if entry.name == SETTINGS or entry.is_symlink():
                continue
            try:
                _bring_home(Path(entry.path), self.theirs / entry.name)
            except OSError as exc:
                logger.warning("gemini's %s was not brought home: %s", entry.name, exc)

    def _give_back_settings(self) -> None:
        data = _read(self.shadow / SETTINGS)
        final = {} if data is None else parse_settings(data, "of the session")[0]
        changes = [
            (path, value)
            for path, value in _changes(self._written, final)
            if path[:1] != ("hooks",)
        ]
        hooks = final.get("hooks")
        if hooks != self._written.get("hooks") and isinstance(hooks, dict):
            changes.append((("hooks",), self._without_ours(hooks)))
        if not changes:
            return
        path = self.theirs / SETTINGS
        current = _read(path)
        document, plain = ({}, True) if current is None else parse_settings(current, str(path))
        names = ", ".join(".".join(p) for p, _ in changes)
        if not plain:
            logger.warning(
                "you changed %s in the session: not saved to %s, which has comments "
                "this would lose; set them there again",
                names,
                path,
            )
            return
        _apply(document, changes)
        temporary = path.with_name(f".{SETTINGS}.codex-presence-{os.getpid()}")
        temporary.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        if path.exists():
            shutil.copymode(path, temporary)
        temporary.replace(path)
        logger.info("saved %s, changed in the session, to %s", names, path)

    def _without_ours(self, hooks: dict[str, Any]) -> dict[str, Any]:
        ours = self._ours.get("hooks", {})
        out: dict[str, Any] = {}
        for event, definitions in hooks.items():
            mine = ours.get(event, [])
            if isinstance(definitions, list):
                kept = [d for d in definitions if d not in mine]
                if kept or event in self._their_events:
                    out[event] = kept
            else:
                out[event] = definitions
        return out


def _bring_home(made: Path, home: Path) -> None:
    """Move ``made`` (in the shadow) to ``home`` (its place in the person's ``.gemini``):
    a directory into theirs entry by entry, a file over theirs (gemini wrote it last)."""
    if made.is_dir() and not made.is_symlink():
        if not os.path.lexists(home):
            shutil.move(made, home)
            return
        for entry in os.scandir(made):
            _bring_home(Path(entry.path), home / entry.name)
        return
    temporary = home.with_name(f".{home.name}.codex-presence-{os.getpid()}")
    shutil.copy2(made, temporary, follow_symlinks=False)
    try:
        temporary.replace(home)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
