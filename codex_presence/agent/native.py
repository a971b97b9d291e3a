"""The native codex behind npm's launcher, for the start of what the shells run (issue 27).

``codex`` installed by npm is ``@openai/codex/bin/codex.js``: a node script that finds the
platform's native binary and runs it (``execve`` on node >= 22.15, a child it waits for on
older ones) with two things added to the environment. Node's start is 110-120 ms of CPU,
on the way to the TUI's first paint, and ``codex-presence codex`` would pay it a second
time for the app-server, beside the TUI's own start. :func:`native_codex` returns what the
launcher would run, so that ``codex-presence codex`` can start both, and ``wrap`` its
``codex app-server``, without node; or None whenever that is not certain, and the launcher
is run as it is. Only ``os`` and the interpreter's built-in SHA-256 are loaded: this runs
before the spawns, and a command that is not a launcher costs a ``stat`` or two.

Certain means: the program found on ``PATH`` is, after its symlinks, a launcher whose
text we have read (:data:`KNOWN_LAUNCHERS`, by SHA-256: a launcher of another codex
version, which may resolve or set something else, is run as it is), and each of its
decisions can be made here the way node makes it:

* the binary: ``require.resolve("@openai/codex-<platform>/package.json")`` from the
  script's real directory, i.e. the first ``node_modules`` of node's walk up from it that
  holds the platform package, without an ``exports`` map (which could redirect it); its
  real path's ``vendor/<target triple>/bin/codex``, which must be an executable file.
  Found nowhere on the walk, node would also look in ``$NODE_PATH`` and its global
  folders: not replicated, the launcher runs.
* the environment: ours, with ``CODEX_MANAGED_PACKAGE_ROOT`` (the package's real root)
  and one ``CODEX_MANAGED_BY_*`` flag (the others removed) naming the package manager.
  The launcher's guess of it is replicated for npm only (its answer when there is no sign
  of pnpm, Vite+ or bun): any such sign (a ``packages`` directory or a
  ``node_modules/.modules.yaml`` on the way up, a bun user agent, exec path or install
  directory) runs the launcher.
* node itself must see the script where we do: ``$NODE_OPTIONS`` (which may hold
  ``--preserve-symlinks-main``) or ``$NODE_PRESERVE_SYMLINKS`` set runs the launcher.

``tests/test_codex_native.py`` starts the app-server of every installed codex version both
ways and compares the processes: executable, arguments and environment.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded before the children run
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["KNOWN_LAUNCHERS", "native_codex"]

KNOWN_LAUNCHERS = frozenset(
    {
        # @openai/codex 0.169.0's bin/codex.js
        "e14fc83739c13c1074b12bd1acce4010c893c7f6fbfc1593b4a31d74cabb57af",
        # @openai/codex 0.171.0's bin/codex.js
        "0e0c66f50074965a40cbd12f625b0a35963baf41bbd8c201a93e32fddbe2e073",
    }
)
"""The launchers whose resolution and environment :func:`native_codex` replicates."""

_TARGETS = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
"""``uname -m`` → the launcher's target triple (Linux only: its others are not ours)."""
_PLATFORM_PACKAGES = {
    "x86_64-unknown-linux-musl": "@openai/codex-linux-x64",
    "aarch64-unknown-linux-musl": "@openai/codex-linux-arm64",
}
_MANAGED_BY = (
    "CODEX_MANAGED_BY_NPM",
    "CODEX_MANAGED_BY_BUN",
    "CODEX_MANAGED_BY_PNPM",
    "CODEX_MANAGED_BY_VITE_PLUS",
)
_LAUNCHER_MAX = 1 << 20


def native_codex(program: str, env: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
    """The native binary and the environment npm's launcher ``program`` (a name looked up
    on ``env``'s ``PATH``, as ``execvpe`` does, or a path) would run it with, given
    ``env``; None unless certain (see the module's doc). Never raises."""
    try:
        return _native_codex(program, env)
    except (OSError, ValueError):
        return None


def _native_codex(program: str, env: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
    if env.get("NODE_OPTIONS") or env.get("NODE_PRESERVE_SYMLINKS"):
        return None
    target = _TARGETS.get(os.uname().machine) if os.uname().sysname == "Linux" else None
    entry = _on_path(program, env)
    if target is None or entry is None:
        return None
    script = os.path.realpath(entry)
    if not _known_launcher(script):
        return None
    script_dir = os.path.dirname(script)
    package_root = os.path.realpath(os.path.join(script_dir, ".."))
    binary = _platform_binary(script_dir, _PLATFORM_PACKAGES[target], target)
    if binary is None or not _npm_managed(package_root, os.path.dirname(entry), script_dir, env):
        return None
    native_env = {k: v for k, v in env.items() if k not in _MANAGED_BY}
    native_env["CODEX_MANAGED_PACKAGE_ROOT"] = package_root
    native_env["CODEX_MANAGED_BY_NPM"] = "1"
    return binary, native_env


def _on_path(program: str, env: Mapping[str, str]) -> str | None:
    """Where ``execvpe`` finds ``program``, made absolute (node's ``process.argv[1]``)."""
    if "/" in program:
        candidates = [program]
    else:
        candidates = [os.path.join(d or ".", program) for d in os.get_exec_path(dict(env))]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def _known_launcher(script: str) -> bool:
    with open(script, "rb") as f:
        if os.fstat(f.fileno()).st_size > _LAUNCHER_MAX:  # a binary: not read (wrap's python)
            return False
        text = f.read(_LAUNCHER_MAX + 1)
    return len(text) <= _LAUNCHER_MAX and _sha256(text) in KNOWN_LAUNCHERS


def _sha256(data: bytes) -> str:
    """SHA-256 of ``data``, in hex, by the interpreter's own built-in module where it has
    one: ``hashlib`` loads OpenSSL first (3.5 ms here), which this runs before the TUI's
    spawn would pay in full."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:  # an interpreter built without them
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def _node_module_dirs(start: str) -> list[str]:
    """Node's ``Module._nodeModulePaths(start)``: ``DIR/node_modules`` for ``start`` and
    each directory above it, except those that are themselves a ``node_modules``."""
    dirs: list[str] = []
    current = start
    while True:
        if os.path.basename(current) != "node_modules":
            dirs.append(os.path.join(current, "node_modules"))
        parent = os.path.dirname(current)
        if parent == current:
            return dirs
        current = parent


def _platform_binary(script_dir: str, package: str, target: str) -> str | None:
    """The launcher's ``findCodexExecutable()``, where ``require.resolve`` finds the
    platform package on node's walk up from the script; None elsewhere."""
    for modules in _node_module_dirs(script_dir):
        manifest = os.path.join(modules, package, "package.json")
        if not os.path.isfile(manifest):
            continue
        with open(manifest, "rb") as f:
            text = f.read(_LAUNCHER_MAX + 1).strip()
        if not (text.startswith(b"{") and text.endswith(b"}")) or b'"exports"' in text:
            # An exports map may send package.json elsewhere: node's to read. Read as
            # bytes, not parsed (json's 1.7 ms would come before the TUI's spawn): the
            # word anywhere, or a text that is no object, is uncertain.
            return None
        vendor = os.path.join(os.path.dirname(os.path.realpath(manifest)), "vendor")
        binary = os.path.join(vendor, target, "bin", "codex")
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        return None  # the launcher fails ("Missing optional dependency"): let it say so
    return None


def _npm_managed(
    package_root: str, entry_dir: str, script_dir: str, env: Mapping[str, str]
) -> bool:
    """Whether the launcher's ``detectPackageManager()`` says npm (or nothing, which it
    takes for npm), judged from the absence of every sign of the others."""
    for start in (package_root, entry_dir):
        current = start
        while True:
            if os.path.basename(current) == "packages":  # a Vite+ install, maybe
                return False
            if os.path.exists(os.path.join(current, "node_modules", ".modules.yaml")):
                return False  # a pnpm install, maybe
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    if "bun/" in env.get("npm_config_user_agent", "") or "bun" in env.get("npm_execpath", ""):
        return False
    return ".bun/install/global" not in script_dir
