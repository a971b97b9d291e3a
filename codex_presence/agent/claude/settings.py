"""How claude is started with our hooks: its arguments, its environment, and the private
files it reads.

* **Its arguments**: ``--settings FILE`` is put after the command's first word. claude takes
  only the last ``--settings`` given, so one of the person's own (a file, or a JSON object)
  is taken out (:func:`split_settings`) and carried in FILE, our hooks after theirs.
* **FILE** (0600, in the session's private 0700 directory): one hook per event the mapping
  reads (:func:`~codex_presence.core.claude.protocol.with_hooks`): a command hook running
  a bash script beside FILE, async but for SessionEnd (and Stop and StopFailure in print
  mode): claude exits then, and kills what runs of its async hooks. On Linux
  (:func:`spools`) the script writes the hook into the private ``SPOOL`` directory, which
  no other user can reach (:mod:`codex_presence.agent.hooks.spool`); elsewhere it POSTs
  it to the loopback hook server, its URL and secret in the script (curl and its config
  file where there is no bash); an HTTP hook where there is neither bash nor curl, its
  secret in a header, never in the URL claude prints when the hook fails
  (:func:`with_our_hooks`).
* **Which hooks** (:func:`with_our_hooks`): an interactive claude of a version whose
  session status file is known to say its state alone
  (:data:`~codex_presence.core.claude.protocol.FILE_LED_VERSIONS`) gets only the hooks
  that fire outside a turn (SessionStart, SessionEnd), so its spinner names none of ours;
  the file leads. Any other (print mode, an unknown version, ``--claude-hooks all``) gets
  a hook for every event the mapping reads. The version is read beside the binary, never
  by running it (:func:`claude_version`).
* **Its environment** (:func:`child_environment`): ours without the token, loopback in
  ``NO_PROXY`` (no proxy ever sees the hook URL), and the flags of claude's parting
  ``--resume`` hint taken from the person's arguments, not from ours.
"""

from __future__ import annotations

import json
import os

from codex_presence.agent.installed import installed_version, which
from codex_presence.core.claude.protocol import (
    FILE_LED_EVENTS,
    FILE_LED_VERSIONS,
    HOOK_EVENTS,
    PACKAGE,
    RESUME_HINT_FLAGS_ENV,
    prints,
    resume_hint_flags,
    with_hooks,
)
from codex_presence.core.hooks.poster import (
    SPOOL,
    curl_config,
    poster_command,
    poster_script,
    script_command,
    spool_script,
    spools,
)

TYPE_CHECKING = False  # typing is not loaded before claude's spawn (issue 34)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = [
    "SettingsError",
    "child_environment",
    "claude_version",
    "split_settings",
    "with_our_hooks",
]


def _log(level: str, message: str, *args: object) -> None:
    """Log as ``codex_presence.claude`` (lazily: ``logging`` loads after claude's spawn)."""
    import logging

    getattr(logging.getLogger("codex_presence.claude"), level)(message, *args)


class SettingsError(Exception):
    """The ``--settings`` given in claude's arguments cannot be read."""


def split_settings(command: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """``claude ARGS...`` without a ``--settings`` of the user's (claude takes the last one
    given, so ours must carry theirs), and that settings document ({} if none): a JSON
    object, or a file holding one. Raises :class:`SettingsError`."""
    argv: list[str] = [command[0]]
    value: str | None = None
    args = iter(command[1:])
    for arg in args:
        if arg == "--settings":
            value = next(args, None)
            if value is None:
                raise SettingsError("--settings needs a file or a JSON object")
        elif arg.startswith("--settings="):
            value = arg.removeprefix("--settings=")
        else:
            argv.append(arg)
    if value is None:
        return argv, {}
    text = value
    if not value.lstrip().startswith("{"):
        try:
            with open(value, encoding="utf-8") as given:
                text = given.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"--settings {value}: {getattr(exc, 'strerror', exc)}") from exc
    try:
        settings = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise SettingsError(f"--settings {value}: not JSON ({exc})") from exc
    if not isinstance(settings, dict):
        raise SettingsError(f"--settings {value}: not a JSON object")
    return argv, settings


def _not_json(constant: str) -> object:
    """``NaN``, ``Infinity``: Python's json module takes them, JSON does not."""
    raise ValueError(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    """A JSON number as a float, one too large for a double (``1e400``) refused."""
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return number


def _with_settings(command: Sequence[str], settings: str) -> list[str]:
    """``claude ARGS...`` → ``claude --settings FILE ARGS...``."""
    return [command[0], "--settings", settings, *command[1:]]


def child_environment(
    environ: Mapping[str, str],
    *,
    drop: Sequence[str] = (),
    hinted_args: Sequence[str] | None = None,
) -> dict[str, str]:
    """claude's environment: ours, without ``drop``, with loopback in ``NO_PROXY`` (hook
    POSTs honour HTTP(S)_PROXY: a proxy would get the hook URL, secret included), and, when
    ``hinted_args`` are given (the arguments the person gave claude, to which we add
    ``--settings FILE``), the flags of claude's parting ``--resume`` hint taken from them
    instead of from the arguments claude gets (:func:`resume_hint_flags`) — unless our own
    environment already chose them."""
    env = {key: value for key, value in environ.items() if key not in drop}
    for key in ("NO_PROXY", "no_proxy"):
        hosts = [h.strip() for h in env.get(key, "").split(",") if h.strip()]
        if "127.0.0.1" not in hosts:
            hosts.append("127.0.0.1")
        env[key] = ",".join(hosts)
    if hinted_args is not None:
        env.setdefault(RESUME_HINT_FLAGS_ENV, resume_hint_flags(hinted_args))
    return env


def _write_private(directory: str | os.PathLike[str], name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


def _hook_command(
    private: str | os.PathLike[str],
    hook_url: Callable[[], str],
    env: Mapping[str, str],
    later: list[Callable[[], None]] | None = None,
) -> str | None:
    """The command hook that delivers claude's hooks (its script or config file written in
    ``private``): where they are spooled (:func:`spools`), a bash script writing into
    ``private/SPOOL`` (:func:`spool_script`, made here; ``hook_url`` is never called: no
    socket is opened), else one POSTing to ``hook_url()`` (:func:`poster_script`: a third
    of curl's CPU), else curl; None where claude's PATH has neither bash nor curl: then
    HTTP hooks.

    Whether bash opens ``/dev/tcp`` (:func:`_opens_tcp`: starting bash costs 35-50 ms on
    the way to claude's first paint on a loaded machine) is checked after claude's spawn
    where curl can stand in: a check for ``later`` (run by the caller as soon as claude is
    spawned, long before its first hook) puts curl in the script if bash cannot."""
    path = env.get("PATH", os.defpath)
    bash, cat = which("bash", path=path), which("cat", path=path)
    curl = which("curl", path=path)
    if bash is not None and cat is not None and "'" not in cat + os.fspath(private) and spools(env):
        spool = os.path.join(private, SPOOL)
        os.mkdir(spool, 0o700)
        script = _write_private(private, "poster.sh", spool_script(spool, cat=cat).encode())
        return script_command(bash, script)
    url = hook_url()
    if bash is not None and cat is not None and "'" not in cat:
        if later is not None and curl is not None:
            script = _write_private(private, "poster.sh", poster_script(url, cat=cat).encode())
            later.append(lambda: _curl_unless_bash_opens_tcp(bash, curl, script, url, env))
            return script_command(bash, script)
        if _opens_tcp(bash, url, env):
            script = _write_private(private, "poster.sh", poster_script(url, cat=cat).encode())
            return script_command(bash, script)
    if curl is None:
        _log(
            "info",
            "no bash or curl on the PATH: claude's hooks are HTTP hooks, named in its spinner",
        )
        return None
    config = _write_private(private, "curl.cfg", curl_config(url).encode())
    return poster_command(curl, config)


def _curl_unless_bash_opens_tcp(
    bash: str, curl: str, script: str | os.PathLike[str], url: str, env: Mapping[str, str]
) -> None:
    """Where ``bash`` cannot open ``/dev/tcp``, ``script`` (the poster claude's hooks run
    with it) becomes one that runs curl (``exec``: its pid stays the hook's sequence
    number), replaced whole, never seen half-written."""
    if _opens_tcp(bash, url, env):
        return
    directory = os.path.dirname(script)
    config = _write_private(directory, "curl.cfg", curl_config(url).encode())
    replacement = _write_private(
        directory, "poster.sh.new", f"{poster_command(curl, config)}\n".encode()
    )
    os.replace(replacement, script)


def _opens_tcp(bash: str, url: str, env: Mapping[str, str]) -> bool:
    """Whether ``bash`` opens ``/dev/tcp`` to our hook server at ``url``: a bash built
    without network redirections (rare; Debian's and macOS's have them) would deliver no
    hook at all, so it is tried once, a connection that sends nothing (about 2 ms)."""
    import subprocess
    from urllib.parse import urlsplit

    port = urlsplit(url).port
    # No timeout: subprocess would poll for the end in sleeps (11 ms here, before claude's
    # spawn); the connection is to our own listening socket, which the kernel completes
    # at once (its backlog holds it until the server accepts).
    try:
        done = subprocess.run(
            [bash, "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(env),
        )
    except (OSError, subprocess.SubprocessError):
        done = None
    if done is None or done.returncode != 0:
        _log("warning", "%s cannot open /dev/tcp: claude's hooks run curl instead", bash)
        return False
    return True


def claude_version(program: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The version of the claude that ``program`` (found on claude's ``PATH``) runs, read
    beside its binary without running it, and the path it was read from
    (:func:`~codex_presence.agent.installed.installed_version`: npm's package or the native
    installer's ``versions/2.1.332``); (None, the path) for a wrapper script, another
    package."""
    return installed_version(program, PACKAGE, env)


def _file_leads(
    program: str, env: Mapping[str, str], *, hooks: str, printing: bool, command: str | None
) -> tuple[bool, str]:
    """Whether claude's session file can lead (see the module doc), and why (or why not;
    nothing when there is no ``program`` to run at all)."""
    every = "a hook for every event (claude's spinner may name some)"
    if hooks == "all":
        return False, f"--claude-hooks all: {every}"
    if printing:
        return False, "print mode (-p): a hook for every event (claude -p writes its file once)"
    if command is None:
        return False, f"no command hook possible (SessionStart needs one): {every}"
    version, where = claude_version(program, env)
    if version is None and which(program, path=env.get("PATH", os.defpath)) is None:
        return False, ""  # no claude to run: its start says so, and nothing else need be
    if version is None:
        return False, f"claude's version is not known beside {where}: {every}"
    if version not in FILE_LED_VERSIONS:
        return False, f"claude {version}'s session file is not one checked: {every}"
    return True, (
        f"claude {version}, interactive: its session file leads; hooks only at its start and "
        "end, none in its spinner"
    )


def with_our_hooks(
    argv: Sequence[str],
    settings: Mapping[str, Any],
    url: str | Callable[[], str],
    *,
    private: str | os.PathLike[str],
    env: Mapping[str, str],
    hooks: str = "auto",
    later: list[Callable[[], None]] | None = None,
) -> tuple[list[str], bool]:
    """``claude ARGS...`` with ``--settings FILE``, and whether claude's session file leads:
    FILE (written in ``private``) holds the person's ``settings`` and our hooks to ``url``
    (only :data:`~codex_presence.core.claude.protocol.FILE_LED_EVENTS` when the file leads,
    else every event: :func:`_file_leads`, said once in the log); command hooks where
    claude's PATH has bash or curl (:func:`_hook_command`), async but for SessionEnd (and in
    print mode, which ends with the turn, Stop and StopFailure), else HTTP hooks. ``later``: where
    given, gets what is to be checked and said once claude runs (see :func:`_hook_command`;
    the log line), for the caller to run then. ``url`` may be a function that opens the
    hook server's socket and says its URL: called only where the hooks are not spooled
    (issue 34: no socket, no thread where none is needed, before claude's spawn)."""
    printing = prints(argv[1:])
    urls: list[str] = []

    def hook_url() -> str:
        if not urls:
            urls.append(url if isinstance(url, str) else url())
        return urls[0]

    command = _hook_command(private, hook_url, env, later)
    file_led, why = _file_leads(argv[0], env, hooks=hooks, printing=printing, command=command)
    if why and later is not None:  # said once claude runs: logging loads after its spawn
        later.append(lambda: _log("info", "claude's hooks: %s", why))
    elif why:
        _log("info", "claude's hooks: %s", why)
    events = FILE_LED_EVENTS if file_led else HOOK_EVENTS
    document = json.dumps(
        with_hooks(
            settings,
            hook_url() if command is None else "",
            command=command,
            events=events,
            printing=printing,
        ),
        separators=(",", ":"),
    ).encode()
    return _with_settings(argv, _write_private(private, "settings.json", document)), file_led
