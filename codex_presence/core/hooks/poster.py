"""The poster of a command hook: the shell command (and the bash script or curl config
behind it) that hands the JSON an agent client writes to a hook's stdin to the runner, with
its process id as a sequence number (read by :mod:`.hook_order`).

Two ways, one per kind of reader:

* **The spool** (:func:`spool_script`, where the runner can watch a directory: Linux's
  inotify): bash writes the payload into a file of its own, ``<pid>.hook``, in a
  directory inside the runner's private 0700 directory, and exits; the runner's spool
  reader (:mod:`codex_presence.agent.hooks.spool`) reads it when the kernel says it was
  closed. Only the owner can write there (the directory's mode decides), so another local
  user cannot even reach it, let alone flood it; no secret is needed, none is in any
  command, URL or message; no connection, no wait for an answer. A file is ``LENGTH\n``
  then the payload: one a poster killed mid-write (a client kills its async hooks at exit)
  is told apart (:func:`spooled_hook`) and dropped.
* **HTTP** to the loopback hook server
  (:mod:`codex_presence.agent.hooks.hook_server`) elsewhere: :func:`poster_script`
  (bash's ``/dev/tcp``) or curl (:func:`poster_command`), with the pid in
  :data:`SEQ_HEADER`.

Shared by every hook-driven client: a client's settings layer registers
:func:`script_command` (or :func:`poster_command`) as its hook command. Pure strings.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping

__all__ = [
    "HOOK_SECRET_HEADER",
    "MAX_BODY",
    "POST_TIMEOUT",
    "SEQ_HEADER",
    "SPOOL",
    "SPOOL_ENV",
    "SPOOL_SUFFIX",
    "curl_config",
    "poster_command",
    "poster_script",
    "script_command",
    "spool_script",
    "spooled_hook",
    "spools",
]

POST_TIMEOUT = 2
"""Seconds a poster waits for the server's answer, by default."""

HOOK_SECRET_HEADER = "x-codex-presence-secret"
"""Where a client's HTTP hook carries the hook server's secret, its URL without it: a client
may print the URL of a hook that fails or is cancelled (``SessionEnd hook [URL] failed: Hook
cancelled``, on the person's terminal in print mode) and writes it into its transcript,
its headers never."""

SEQ_HEADER = "x-hook-seq"
"""The header in which a command hook's delivery says its process id (its sequence number,
:mod:`codex_presence.core.hooks.hook_order`)."""


def poster_command(curl: str, config: str) -> str:
    """The shell command of an async command hook: ``curl`` POSTs the payload the client
    writes to its stdin as the ``config`` file says (``curl_config``: the URL, with its secret, is
    kept out of every process list), with the shell's pid as :data:`SEQ_HEADER` (``exec``
    keeps it curl's). ``-q`` first: no ``~/.curlrc`` of the user's."""
    quoted = f"{shlex.quote(curl)} -q -K {shlex.quote(config)}"
    return f'exec {quoted} -H "{SEQ_HEADER}: $$"'


_LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:(\d{1,5})(/[A-Za-z0-9_~./-]+)")


def script_command(bash: str, script: str) -> str:
    """The shell command of an async command hook that runs :func:`poster_script` with
    ``bash`` (``exec``: the process the client started is bash, whose pid is
    :data:`SEQ_HEADER`)."""
    return f"exec {shlex.quote(bash)} {shlex.quote(script)}"


def poster_script(url: str, *, cat: str, timeout: int = POST_TIMEOUT) -> str:
    """A bash script that POSTs the payload the client writes to its stdin to ``url`` (ours:
    ``http://127.0.0.1:PORT/SECRET/hook``) through bash's own ``/dev/tcp``, with bash's
    pid as :data:`SEQ_HEADER`, and waits ``timeout`` seconds at most for a 200. It costs
    a third of curl's start in CPU, and about half its added delay to the roster
    (docs/benchmarks.md). The URL, secret included, is in the script (a private file),
    never in a process list.
    stdin is read by ``cat`` (a client's stdin to a hook may be a socket, which
    ``/dev/stdin`` cannot open), in the C locale, so ``${#body}`` counts bytes. Raises ValueError
    for a URL that is not a loopback one of that shape (it goes into the script as it is)."""
    match = _LOOPBACK_URL.fullmatch(url)
    if match is None or "'" in cat:
        raise ValueError(f"not a loopback hook URL or a usable cat: {url!r}, {cat!r}")
    port, path = match.groups()
    head = (
        "POST %s HTTP/1.0\\r\\nhost: 127.0.0.1\\r\\ncontent-type: application/json\\r\\n"
        f"content-length: %d\\r\\n{SEQ_HEADER}: %d\\r\\n\\r\\n%s"
    )
    return "\n".join(
        [
            "# codex-presence: one hook, POSTed to this session's hook server",
            "exec 2>/dev/null",
            "LC_ALL=C",
            f"body=$('{cat}')",
            f"exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7",
            f"""printf '{head}' '{path}' "${{#body}}" "$$" "$body" >&3 || exit 55""",
            f"IFS= read -r -t {timeout} -u 3 status || exit 28",
            "case $status in 'HTTP/1.'?' 200 '*) exit 0 ;; esac",
            "exit 22",
            "",
        ]
    )


def curl_config(url: str, *, timeout: int = POST_TIMEOUT) -> str:
    """The curl config file behind :func:`poster_command`: POST stdin to ``url``, no proxy,
    nothing printed, ``timeout`` seconds at most."""
    return "\n".join(
        [
            f'url = "{url}"',
            'header = "content-type: application/json"',
            'data-binary = "@-"',
            'noproxy = "*"',
            'output = "/dev/null"',
            "silent",
            f"max-time = {timeout}",
            "",
        ]
    )


MAX_BODY = 32 * 1024 * 1024
"""The largest hook we take, posted (the hook server's 413) or spooled (dropped): hook
bodies carry tool inputs and outputs (the client truncates those); far above them."""

SPOOL = "spool"
"""The directory, in a session's private one, that the spool poster writes hooks into
(:mod:`codex_presence.agent.hooks.spool`): it exists when the hooks are spooled."""

SPOOL_ENV = "CODEX_PRESENCE_HOOK_SPOOL"
"""``0`` in the runner's environment: POST hooks to the loopback server even where they
could be spooled (the way other systems take, kept testable on Linux)."""


def spools(env: Mapping[str, str]) -> bool:
    """Whether hooks are spooled, given the runner's environment: on Linux, where the
    runner is woken by inotify when a file is written (else they are POSTed to the loopback
    hook server)."""
    return sys.platform.startswith("linux") and env.get(SPOOL_ENV) != "0"


SPOOL_SUFFIX = ".hook"
"""A spooled hook's file is ``<pid><SPOOL_SUFFIX>``."""

_SPOOL_NAME = re.compile(r"([0-9]{1,12})" + re.escape(SPOOL_SUFFIX))


def spool_script(directory: str, *, cat: str) -> str:
    """A bash script that writes the payload the client gives its stdin into
    ``directory/<pid>.hook`` (bash's pid: the sequence number), as ``LENGTH\\n`` then the
    payload, and exits: nothing to wait for. ``set -C``: an existing file is never
    overwritten (a pid used again before the last one was read fails this hook, never
    that one). stdin is read by ``cat`` in the C locale (see :func:`poster_script`).
    Raises ValueError for a directory or cat that cannot go into the script as they are."""
    if "'" in directory or "'" in cat or not directory.startswith("/"):
        raise ValueError(f"not a usable spool directory or cat: {directory!r}, {cat!r}")
    return "\n".join(
        [
            "# codex-presence: one hook, written into this session's private spool",
            "exec 2>/dev/null",
            "LC_ALL=C",
            "set -C",
            f"body=$('{cat}')",
            f"""printf '%d\\n%s' "${{#body}}" "$body" >'{directory}'/$$'{SPOOL_SUFFIX}'""",
            "",
        ]
    )


def spooled_hook(name: str, data: bytes) -> tuple[bytes, int] | None:
    """A spooled file's payload and sequence number, from its ``name`` and contents; None
    when the name is not a hook's, or the payload is not whole (its poster was killed
    while writing)."""
    match = _SPOOL_NAME.fullmatch(name)
    if match is None:
        return None
    length, newline, payload = data.partition(b"\n")
    if not newline or not length.isdigit() or len(length) > 12 or int(length) != len(payload):
        return None
    return payload, int(match.group(1))
