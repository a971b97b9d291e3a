"""``codex-presence replay FILE...``: print a recorded session's state timeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "print the state timeline of recorded sessions (recordings or plain app-server stdout)"

_EPILOG = """\
Reads the project's recording format (JSON Lines {"t", "from", "msg"}, as written by
`wrap --record`) or plain app-server stdout (one JSON-RPC message per line), detected
from the first line. One line per transition: time, new state, and the message that
caused it. With --json, one object per transition:
  {"t": <float or null>, "line": <1-based input line>, "state": ..., "cause": ...}
Exit status: 0 on success, 2 for a missing or unreadable file."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path, help="sessions to replay")
    parser.add_argument("--json", action="store_true", help="print one JSON object per transition")
    parser.add_argument(
        "--speed",
        type=float,
        default=None,
        metavar="X",
        help="replay in real time scaled by X (2 = twice as fast); default: as fast as possible",
    )


def run(args: argparse.Namespace) -> int:
    import anyio
    import orjson

    from ._cli import UsageError
    from ._replay import TimelineRow, replay_paths

    if args.speed is not None and not args.speed > 0:
        raise UsageError("--speed must be a positive number")
    for path in args.files:
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            sys.stderr.write(f"codex-presence replay: cannot read {path}: {exc.strerror}\n")
            return 2
    several = len(args.files) > 1
    out = sys.stdout

    def on_row(path: Path, row: TimelineRow) -> None:
        if args.json:
            record = row.as_json()
            if several:
                record = {"file": str(path), **record}
            out.write(orjson.dumps(record).decode() + "\n")
        else:
            when = "        -" if row.t is None else f"{row.t:9.3f}"
            where = "eof" if row.line is None else f"line {row.line}"
            prefix = f"{path}: " if several else ""
            out.write(f"{prefix}{when}  {row.state:<8} {row.cause}  ({where})\n")
        out.flush()

    try:
        anyio.run(lambda: replay_paths(args.files, speed=args.speed, on_row=on_row))
    except OSError as exc:
        sys.stderr.write(f"codex-presence replay: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
    return 0
