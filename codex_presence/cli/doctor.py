"""``codex-presence doctor [--codex PATH]``: does the mapping know everything this codex sends?

The I/O around :mod:`codex_presence.core.codex.schema`: runs the user's codex to write its
protocol schema into a temporary directory, reads the files the reader needs, and prints,
for that version, every name the mapping does not classify. Import-light, like every
command module: what it needs loads inside :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codex_presence.core.codex.schema import ProtocolSets

HELP = "check that codex-presence classifies everything your codex can send"

_EPILOG = """\
Runs `CODEX app-server generate-json-schema --experimental` (the experimental schema is a
superset: clients such as the TUI opt in to it) into a temporary directory and reads, for
that codex version:

  server request methods  each must be blocking (a person must answer: the member shows
                          "blocked") or automatic (the client answers by itself)
  thread item types       each must be a tool (running it shows "working") or passive
  thread status types     each must be known (idle, systemError, notLoaded end the
                          thread's turns; active carries the flags)
  active flags            each must be known (waitingOnApproval, waitingOnUserInput block)

It prints every name codex-presence does not classify. An unclassified name means the
state may be wrong with this codex: a new kind of approval request would not show
"blocked", a new kind of tool would count only while its turn runs. wrap also warns, once
per session, about an unknown request method or item type it sees live.

Exit status: 0 when everything is classified, 1 when anything is not, 2 when the schema
could not be made or read (no codex at PATH, codex failed or timed out, files missing).

examples:
  codex-presence doctor
  codex-presence doctor --codex ~/.local/bin/codex
"""

_SETS = (
    # (ProtocolSets field, title, what an unclassified name is, Classification fields)
    (
        "server_requests",
        "server request methods",
        "neither blocking nor automatic",
        ("blocking_requests", "automatic_requests"),
    ),
    ("item_types", "thread item types", "neither tool nor passive", ("tool_item_types",)),
    ("thread_statuses", "thread status types", "unknown", ("ending_statuses",)),
    ("active_flags", "active flags", "unknown", ("waiting_flags",)),
)


class _DoctorError(Exception):
    """The schema could not be made or read; exit status 2."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.add_argument(
        "--codex",
        metavar="PATH",
        default="codex",
        help="the codex to check (default: `codex` on $PATH)",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=60.0,
        help="give up on codex after this long (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from codex_presence.cli.main import UsageError

    if not args.timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds")
    try:
        codex = _find(args.codex)
        version = _codex(codex, ["--version"], args.timeout).strip() or "codex (no version)"
        sets = _read_sets(codex, args.timeout)
    except _DoctorError as exc:
        sys.stderr.write(f"codex-presence doctor: {exc}\n")
        return 2
    return _report(version, codex, sets)


def _find(codex: str) -> str:
    import os
    import shutil
    from pathlib import Path

    found = shutil.which(codex)
    if found is not None:
        return found
    if os.sep in codex and Path(codex).is_file():  # there, but which() wants it executable
        raise _DoctorError(f"{codex} is not executable (chmod +x it, or give another --codex)")
    raise _DoctorError(f"no codex at {codex!r} (give its path with --codex)")


def _codex(codex: str, arguments: list[str], timeout: float) -> str:
    """Run codex; its stdout. In a session of its own, so that a timeout ends the npm
    launcher and the binary under it alike."""
    import os
    import signal
    import subprocess

    command = [codex, *arguments]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise _DoctorError(f"cannot run {codex}: {exc.strerror or exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise _DoctorError(f"`{' '.join(command)}` took more than {timeout:g} s") from None
    if process.returncode != 0:
        said = stderr.decode(errors="replace").strip().splitlines()
        why = f": {said[-1]}" if said else ""
        raise _DoctorError(f"`{' '.join(command)}` exited with status {process.returncode}{why}")
    return stdout.decode(errors="replace")


def _read_sets(codex: str, timeout: float) -> ProtocolSets:
    import tempfile
    from pathlib import Path

    import orjson

    from codex_presence.core.codex.schema import SCHEMA_FILES, SchemaDrift, read_schema

    with tempfile.TemporaryDirectory(prefix="codex-presence-doctor-") as tmp:
        out = Path(tmp)
        _codex(
            codex,
            ["app-server", "generate-json-schema", "--experimental", "--out", str(out)],
            timeout,
        )
        if not any(out.iterdir()):
            raise _DoctorError(
                f"`{codex} app-server generate-json-schema` wrote no schema at all: "
                "is it codex? (give its path with --codex)"
            )
        documents: dict[str, object] = {}
        for name in SCHEMA_FILES:
            try:
                documents[name] = orjson.loads((out / name).read_bytes())
            except FileNotFoundError:
                continue  # the reader says which file is missing
            except (OSError, orjson.JSONDecodeError) as exc:
                raise _DoctorError(f"cannot read the schema's {name}: {exc}") from None
        try:
            return read_schema(documents)
        except SchemaDrift as exc:
            raise _DoctorError(f"the schema is not shaped as expected: {exc}") from None


def _report(version: str, codex: str, sets: ProtocolSets) -> int:
    from codex_presence.core.codex.schema import MAPPING, stale, unclassified

    out = sys.stdout
    missing = unclassified(sets)
    extra = stale(sets)
    out.write(f"{version} ({codex}), experimental schema\n")
    for field, title, what, classes in _SETS:
        names: frozenset[str] = getattr(sets, field)
        unknown = missing.get(field, frozenset())
        verdict = f"{len(unknown)} {what}" if unknown else "all classified"
        split = ", ".join(
            f"{len(names & getattr(MAPPING, name))} {name.split('_')[0]}" for name in classes
        )
        out.write(f"  {title}: {len(names)} ({split}), {verdict}\n")
        for name in sorted(unknown):
            out.write(f"    {name}\n")
        for name in sorted(extra.get(field, ())):
            out.write(f"    ({name}: known to codex-presence, not in this schema; harmless)\n")
    count = sum(len(names) for names in missing.values())
    if count:
        out.write(
            f"{count} name(s) unclassified: the state may be wrong with this codex; "
            "update codex-presence, or report them\n"
        )
        return 1
    out.write("ok: codex-presence classifies everything this codex can send\n")
    return 0
