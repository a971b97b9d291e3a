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
import shutil
from collections.abc import Mapping
from pathlib import Path

import orjson

__all__ = ["installed_version"]

_VERSION = re.compile(r"\d{1,4}\.\d{1,4}\.\d{1,6}")
_MANIFEST_BYTES = 256 * 1024
"""A package.json longer than this is not one of these clients'."""


def installed_version(program: str, package: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The version of npm package ``package`` that ``program`` (a path, or a name found on
    ``env``'s ``PATH``) runs, and the path it was read from; (None, where it looked) when
    it cannot be told."""
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        return None, program
    real = Path(os.path.realpath(found))
    if real.parent.name == "versions" and _VERSION.fullmatch(real.name):
        return real.name, str(real)  # a native install, named after its version
    manifest = real.parent.parent / "package.json"
    try:
        if not manifest.is_file():  # not there, or a FIFO, whose open would block
            return None, str(real)
        with manifest.open("rb") as stream:
            document = orjson.loads(stream.read(_MANIFEST_BYTES))
    except (OSError, orjson.JSONDecodeError):
        return None, str(real)
    if not isinstance(document, dict) or document.get("name") != package:
        return None, str(real)
    version = document.get("version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version.split("-", 1)[0]):
        return None, str(real)
    return version, str(manifest)
