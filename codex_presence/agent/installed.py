"""Which version of a client is installed: read beside its program, without running it.

An agent's own words say its version where they can (codex's ``thread/started``, claude's
transcript entries); a session that never says (a codex thread resumed without
``thread/started``, Gemini CLI, which never tells its hooks) would show no version on the
roster. Running ``PROGRAM --version`` costs a process start (node's: hundreds of
milliseconds) on the runner's start-up path; reading the package beside the program costs
two ``stat`` calls and a small file. npm's ``node_modules/.bin/NAME`` is a link into its
package (``@openai/codex/bin/codex.js``, ``@anthropic-ai/claude-code/bin/claude.exe``,
``@google/gemini-cli/bundle/gemini.js``), whose ``package.json`` one directory up from the
file's says the name and version; Claude Code's native installer names its binary after
its version (``versions/2.1.332``). Anything else (a wrapper script, another package, a
binary from elsewhere) is not known, and says so: None.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False  # typing is not loaded before a runner's child starts (issue 34)
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["installed_version", "which"]

_VERSION = re.compile(r"\d{1,4}\.\d{1,4}\.\d{1,6}")
_MANIFEST_BYTES = 256 * 1024
"""A package.json longer than this is not one of these clients'."""


def installed_version(program: str, package: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The version of npm package ``package`` that ``program`` (a path, or a name found on
    ``env``'s ``PATH``) runs, and the path it was read from; (None, where it looked) when
    it cannot be told."""
    import json  # the standard library's: orjson pulls uuid, platform, dataclasses in

    found = which(program, path=env.get("PATH", os.defpath))
    if found is None:
        return None, program
    real = os.path.realpath(found)
    directory, name = os.path.split(real)
    if os.path.basename(directory) == "versions" and _VERSION.fullmatch(name):
        return name, real  # a native install, named after its version
    manifest = os.path.join(os.path.dirname(directory), "package.json")
    try:
        if not os.path.isfile(manifest):  # not there, or a FIFO, whose open would block
            return None, real
        with open(manifest, "rb") as stream:
            document = json.loads(stream.read(_MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError):  # (ValueError: not JSON, not UTF-8)
        return None, real
    if not isinstance(document, dict) or document.get("name") != package:
        return None, real
    version = document.get("version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version.split("-", 1)[0]):
        return None, real
    return version, manifest


def which(command: str, mode: int = os.F_OK | os.X_OK, path: str | None = None) -> str | None:
    """:func:`shutil.which` on POSIX, the same answers, without loading :mod:`shutil` (whose
    import, with bz2 and lzma, weighs on a runner's start before its child's spawn); on
    Windows, shutil's own."""
    if sys.platform == "win32":  # pragma: no cover  (PATHEXT and the current directory)
        import shutil

        return shutil.which(command, mode, path)

    def runnable(name: str) -> bool:
        return os.path.exists(name) and os.access(name, mode) and not os.path.isdir(name)

    if os.path.dirname(command):
        return command if runnable(command) else None
    if path is None:
        path = os.environ.get("PATH", None)
        if path is None:
            try:
                path = os.confstr("CS_PATH")
            except (AttributeError, ValueError):
                path = os.defpath
    if not path:
        return None
    seen: set[str] = set()
    for directory in os.fsdecode(path).split(os.pathsep):
        if directory not in seen:
            seen.add(directory)
            name = os.path.join(directory, command)
            if runnable(name):
                return name
    return None
