"""Replay throughput on a large realistic stream, beside a bare ``orjson.loads`` loop.

    python bench/replay.py [--lines N]

Both run in the same process on the same lines. Printed: messages/s for the bare loop,
for replaying plain app-server stdout, and for replaying the recording format (both
directions, timestamps), with the ratio of each to the bare loop.
Goals (issue 2): ≥ 300 k messages/s and ≥ 0.25× the bare loop.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _streams import server_stream

from codex_presence import encode_entry, read_entries
from codex_presence.core.recording import read_relevant_entries
from codex_presence.core.timeline import timeline


def best_of(runs: int, fn) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    stdout_lines = server_stream(args.lines)
    recording_lines = [
        encode_entry(i * 0.001, "server", line) for i, line in enumerate(stdout_lines)
    ]
    n = len(stdout_lines)
    deltas = sum(1 for line in stdout_lines if b'/delta"' in line[:60] or b'Delta"' in line[:60])
    size_mb = sum(len(line) + 1 for line in stdout_lines) / 1e6
    print(f"stream: {n:,} server lines, {size_mb:.0f} MB, {deltas / n:.0%} deltas")

    def bare() -> None:
        for line in stdout_lines:
            orjson.loads(line)

    def bare_recording() -> None:
        for line in recording_lines:
            orjson.loads(line)

    rows: list[object] = []

    # What `codex-presence replay FILE` does once the file is read: the whole bytes in.
    stdout_bytes = b"\n".join(stdout_lines) + b"\n"
    recording_bytes = b"".join(recording_lines)

    def replay_stdout() -> None:
        rows[:] = timeline(read_relevant_entries(stdout_bytes))

    def replay_recording() -> None:
        rows[:] = timeline(read_relevant_entries(recording_bytes))

    def replay_every_entry() -> None:
        rows[:] = timeline(read_entries(stdout_lines))

    t_bare = best_of(args.runs, bare)
    t_stdout = best_of(args.runs, replay_stdout)
    transitions = len(rows)
    t_bare_rec = best_of(args.runs, bare_recording)
    t_rec = best_of(args.runs, replay_recording)
    t_every = best_of(args.runs, replay_every_entry)
    print(f"transitions per replay: {transitions:,}")
    print(f"bare orjson.loads, stdout lines    : {n / t_bare:12,.0f} msg/s")
    print(
        f"replay, plain app-server stdout    : {n / t_stdout:12,.0f} msg/s  "
        f"ratio {t_bare / t_stdout:.2f}x the bare loop"
    )
    print(
        f"  (every line through the mapping: {n / t_every:12,.0f} msg/s, "
        f"ratio {t_bare / t_every:.2f}x; the bulk pre-filter is what replay uses)"
    )
    print(f"bare orjson.loads, recording lines : {n / t_bare_rec:12,.0f} msg/s")
    print(
        f"replay, recording format           : {n / t_rec:12,.0f} msg/s  "
        f"ratio {t_bare / t_rec:.2f}x the bare stdout loop, "
        f"{t_bare_rec / t_rec:.2f}x the bare recording loop"
    )


if __name__ == "__main__":
    main()
