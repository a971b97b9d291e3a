"""(Re)record scenarios against a real codex binary into ``fixtures/codex-<version>/``.

    .venv/bin/python -m tests.record_fixtures [NAME...]                  # the default binary
    .venv/bin/python -m tests.record_fixtures --codex-version 0.171.0    # run.sh's install
    .venv/bin/python -m tests.record_fixtures --codex PATH [NAME...]     # any binary
    python tests/record_fixtures.py [NAME...]

The version comes from ``codex --version``, never from a path or a flag alone, so a
recording always lands in the directory of the binary that made it. Each recording is
written to ``<name>.jsonl``; its ``<name>.expected.json`` is written by hand from the
recording and is never touched here. The scratch directory is a fixed path under the
system temp dir, so paths inside the recordings do not depend on the host much.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.codex_driver import binary_version, codex_binary, fixtures_dir
from tests.support.scenarios import SCENARIOS, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {sorted(SCENARIOS)}")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--codex",
        type=Path,
        metavar="PATH",
        help="the codex binary (default: $CODEX_PRESENCE_TEST_CODEX, else run.sh's 0.169.0)",
    )
    which.add_argument(
        "--codex-version",
        metavar="VERSION",
        help="the binary tests/run.sh installs for this version",
    )
    parser.add_argument(
        "--out", type=Path, help="output directory (default: fixtures/codex-<version>/)"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    binary: Path = args.codex or codex_binary(args.codex_version)
    try:
        version = binary_version(binary)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        parser.error(f"cannot run {binary} --version: {exc}")
    if args.codex_version and version != args.codex_version:
        parser.error(f"{binary} is codex {version}, not {args.codex_version}")
    out_dir: Path = args.out or fixtures_dir(version)
    print(f"codex {version} ({binary}) -> {out_dir}")
    scratch = Path(tempfile.gettempdir()) / "codex-presence-rec"
    failed = 0
    began = time.monotonic()
    for name in args.names or sorted(SCENARIOS):
        start = time.monotonic()
        out = out_dir / f"{name}.jsonl"
        try:
            record(name, out, root=scratch / name, codex=binary)
        except Exception as exc:  # report every scenario, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        lines = sum(1 for _ in out.open("rb"))
        print(f"{name}: {lines} lines in {time.monotonic() - start:.1f}s -> {out}")
    print(f"done in {time.monotonic() - began:.1f}s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
