"""(Re)record scenarios against the real codex binary into ``fixtures/codex-0.169.0/``.

    .venv/bin/python -m tests.record_fixtures [NAME...]     # all scenarios by default
    python tests/record_fixtures.py [NAME...]

Each recording is written to ``<name>.jsonl``; its ``<name>.expected.json`` is written by
hand from the recording and is never touched here. The scratch directory is a fixed path
under the system temp dir, so paths inside the recordings do not depend on the host much.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.scenarios import SCENARIOS, record

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "codex-0.169.0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {sorted(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="output directory")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    scratch = Path(tempfile.gettempdir()) / "codex-presence-rec"
    failed = 0
    for name in args.names or sorted(SCENARIOS):
        start = time.monotonic()
        out = args.out / f"{name}.jsonl"
        try:
            record(name, out, root=scratch / name)
        except Exception as exc:  # report every scenario, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        lines = sum(1 for _ in out.open("rb"))
        print(f"{name}: {lines} lines in {time.monotonic() - start:.1f}s -> {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
