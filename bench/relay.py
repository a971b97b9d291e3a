"""wrap's cost as a pipe: throughput, added latency per message, peak memory.

    python bench/relay.py [--mb 128] [--messages 3000] [--runs 3]

In one run, on one realistic stream (turns of 0.169.0 app-server messages, mostly deltas;
bench/_streams.py), it prints:

* throughput: ``cat FILE | <middle> | sink``, where the middle is ``codex-presence wrap --
  cat`` or the plain pipeline ``cat | cat``; the sink (the same Python reader for both)
  times the first to the last byte, so wrap's start-up is not counted. Median of
  ``--runs``; the ratio wrap / plain.
* added latency: a child writes one message per millisecond, each stamped with
  CLOCK_MONOTONIC; a reader stamps its arrival. Direct (the reader spawns the child) vs
  through wrap; p50 and p99 of each, and the difference.
* wrap's peak RSS (``ru_maxrss`` of the wrap process) over the throughput runs.
* wrap's own CPU time (user + sys) per MB relayed, next to the middle ``cat``'s of the
  plain pipeline (``wait4`` counts wrap's child ``cat`` in wrap's figure: it is
  subtracted, as is wrap's start-up, measured with ``wrap -- true``), and the machine's
  load: on a shared 2-core machine the throughput swings with other work, the CPU cost
  much less. On a saturated pipe the whole pipeline (source, wrap, the child ``cat``,
  sink) shares the cores, so wrap's CPU per MB, not its threading, bounds the ratio.
* where the time goes, in the same runs: wrap with its analysis switched off (the relay
  alone) and with the mapping inert (the pre-filter alone), patched in for the benchmark
  only; and the analysis alone (pre-filter + mapping on the same stream, in-process).

Goals (issue 3): ratio ≥ 0.5; added p99 ≤ 1 ms; RSS ≤ 40 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _streams import turn_lines

PY = sys.executable
WRAP = [PY, "-m", "codex_presence", "wrap", "--quiet", "--"]


def patched_wrap(patch: str) -> list[str]:
    """``wrap`` with ``patch`` applied first: a diagnostic, never the product."""
    run = "import sys; from codex_presence.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return [PY, "-c", f"{patch}; {run}", "wrap", "--quiet", "--"]


VARIANTS = {
    "relay alone (no analysis)": patched_wrap(
        "import codex_presence.core.prefilter as m; m.ChunkAnalyzer.feed = lambda self, d, c: []"
    ),
    "pre-filter alone (inert mapping)": patched_wrap(
        "import codex_presence.core.codex as m; m.CodexMapping.feed_line = lambda self, d, l: None"
    ),
}
THREADS = ("01a22c94-1743-7cf3-8b22-0496ed4ad6d8", "01a22c95-8421-74e0-992d-d760cc3d2438")

SINK = r"""
import os, sys, time
first = last = None
total = 0
while True:
    data = os.read(0, 1 << 20)
    if not data:
        break
    last = time.perf_counter()
    if first is None:
        first = last
    total += len(data)
print(total, (last or 0) - (first or 0))
"""

TICKER = r"""
import os, sys, time
n = int(sys.argv[1])
head = (b'{"method":"item/agentMessage/delta","params":{"threadId":"01a22c94-1743-7cf3-8b22'
        b'-0496ed4ad6d8","turnId":"01a22c94-175d-7952-9347-6b5b2b6278f9","itemId":"msg-1",'
        b'"delta":"tok ')
start = time.monotonic_ns()
for i in range(n):
    due = start + (i + 1) * 1_000_000
    while (left := due - time.monotonic_ns()) > 0:
        time.sleep(left / 1e9)
    os.write(1, head + b'%d"},"emittedAtMs":%d}\n' % (i, time.monotonic_ns()))
"""

READER = r"""
import os, subprocess, sys, time
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
fd = proc.stdout.fileno()
buf = b""
lat = []
while True:
    data = os.read(fd, 1 << 16)
    now = time.monotonic_ns()
    if not data:
        break
    buf += data
    *lines, buf = buf.split(b"\n")
    for line in lines:
        sent = int(line.rsplit(b":", 1)[1].rstrip(b"}"))
        lat.append(now - sent)
proc.wait()
sys.stdout.write(" ".join(map(str, lat)))
"""


def make_stream(path: Path, megabytes: int) -> tuple[int, float]:
    """Whole turns until the file holds ``megabytes`` MB; returns (bytes, delta share)."""
    size = lines = deltas = 0
    with path.open("wb") as f:
        n = 0
        while size < megabytes * 1_000_000:
            batch = [*turn_lines(THREADS[n % 2], n, deltas_per_message=300)]
            n += 1
            data = b"\n".join(batch) + b"\n"
            f.write(data)
            size += len(data)
            lines += len(batch)
            deltas += sum(1 for ln in batch if b'/delta"' in ln[:60] or b'Delta"' in ln[:60])
    return size, deltas / lines


def pipeline(source: Path, middle: list[list[str]]) -> tuple[int, float, tuple[int, float] | None]:
    """cat source | middle... | sink; (bytes at the sink, first-to-last-byte seconds,
    (peak RSS in KB, CPU seconds) of the first middle process)."""
    procs: list[subprocess.Popen[bytes]] = []
    src = subprocess.Popen(["cat", str(source)], stdout=subprocess.PIPE)
    procs.append(src)
    upstream = src.stdout
    for argv in middle:
        p = subprocess.Popen(argv, stdin=upstream, stdout=subprocess.PIPE)
        assert upstream is not None
        upstream.close()
        upstream = p.stdout
        procs.append(p)
    sink = subprocess.Popen([PY, "-c", SINK], stdin=upstream, stdout=subprocess.PIPE)
    assert upstream is not None
    upstream.close()
    out, _ = sink.communicate(timeout=600)
    rss = None
    for n, p in enumerate(procs):
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if n == 1:
            rss = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        assert p.returncode == 0, (p.args, p.returncode)
    total, seconds = out.split()
    return int(total), float(seconds), rss


def start_up_cpu() -> float:
    """CPU seconds of ``wrap -- true``: imports and set-up, to subtract from a run."""
    proc = subprocess.Popen([*WRAP, "true"], stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_utime + usage.ru_stime


def latencies(command: list[str], messages: int) -> list[float]:
    out = subprocess.run(
        [PY, "-c", READER, *command], capture_output=True, check=True, timeout=600
    ).stdout
    values = [int(v) / 1e6 for v in out.split()]
    assert len(values) == messages, (len(values), messages)
    return values


def analysis_cost(stream: Path) -> tuple[float, float, float]:
    """The analysis alone, in this process, in ms per MB: (all of it, its pre-filter
    alone, lines fed to the mapping per MB). On a saturated pipe it is most of wrap's
    cost: the part to make cheaper. The pre-filter alone is timed with a mapping whose
    ``feed_line`` does nothing."""
    from codex_presence.core.activity import Transition
    from codex_presence.core.codex import CodexMapping, Direction
    from codex_presence.core.prefilter import ChunkAnalyzer

    class Inert(CodexMapping):
        def feed_line(self, direction: Direction, line: bytes) -> Transition | None:
            return None

    data = stream.read_bytes()
    chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    megabytes = len(data) / 1e6
    costs = []
    for mapping in (CodexMapping(), Inert()):
        analyzer = ChunkAnalyzer(mapping)
        start = time.perf_counter()
        for chunk in chunks:
            analyzer.feed("server", chunk)
        costs.append((time.perf_counter() - start) / megabytes * 1e3)
    return costs[0], costs[1], analyzer.stats.fed / megabytes


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=128, help="stream size in MB (≥ 100)")
    parser.add_argument("--messages", type=int, default=3000, help="latency messages")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        stream = Path(tmp) / "stream.jsonl"
        size, delta_share = make_stream(stream, args.mb)
        print(f"stream: {size / 1e6:.0f} MB of app-server JSONL, {delta_share:.0%} deltas")

        print(f"machine: {os.cpu_count()} CPUs, load average {load()} (other work skews figures)")
        plain, wrapped, rss, cpu, cat_cpu = [], [], [], [], []
        variants: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.runs):
            total, seconds, usage = pipeline(stream, [["cat"], ["cat"]])
            assert total == size and usage is not None
            plain.append(size / seconds / 1e6)
            cat_cpu.append(usage[1])
            total, seconds, peak = pipeline(stream, [[*WRAP, "cat"]])
            assert total == size
            wrapped.append(size / seconds / 1e6)
            assert peak is not None
            rss.append(peak[0])
            cpu.append(peak[1])
            for name, argv in VARIANTS.items():
                total, seconds, _ = pipeline(stream, [[*argv, "cat"]])
                assert total == size
                variants[name].append(size / seconds / 1e6)
        p, w = statistics.median(plain), statistics.median(wrapped)
        runs = {
            name: ", ".join(f"{v:.0f}" for v in values)
            for name, values in (("plain", plain), ("wrap", wrapped))
        }
        print(f"throughput  cat | cat:          {p:8.0f} MB/s   (runs: {runs['plain']})")
        print(f"throughput  wrap -- cat:        {w:8.0f} MB/s   (runs: {runs['wrap']})")
        print(f"ratio wrap / plain:             {w / p:8.2f}      (goal >= 0.5)")
        for name, values in variants.items():
            v = statistics.median(values)
            print(f"  diagnostic, {name + ':':34s} {v:5.0f} MB/s   ratio {v / p:4.2f}")
        start = statistics.median(start_up_cpu() for _ in range(3))
        cat = statistics.median(cat_cpu) / (size / 1e6) * 1e3
        own = (statistics.median(cpu) - start) / (size / 1e6) * 1e3 - cat
        print(
            f"CPU per MB relayed:  wrap's own {own:5.2f} ms, a cat's {cat:5.2f} ms"
            f"   (wrap's start-up apart: {start:.2f} s)"
        )

        total, prefilter, fed = analysis_cost(stream)
        print(
            f"analysis alone (server side, 1 MiB chunks): {1e3 / total:4.0f} MB/s = {total:.2f}"
            f" ms/MB: pre-filter {prefilter:.2f}, mapping {total - prefilter:.2f}"
            f" ({fed:.0f} lines/MB fed)"
        )

        ticker = [PY, "-c", TICKER, str(args.messages)]
        direct = latencies(ticker, args.messages)
        through = latencies([*WRAP, *ticker], args.messages)
        for name, values in (("direct", direct), ("through wrap", through)):
            p50, p99 = pct(values, 0.5), pct(values, 0.99)
            print(f"latency {name:13s}           p50 {p50:6.3f} ms   p99 {p99:6.3f} ms")
        print(
            f"added latency per message:      p50 {pct(through, 0.5) - pct(direct, 0.5):6.3f} ms"
            f"   p99 {pct(through, 0.99) - pct(direct, 0.99):6.3f} ms   (goal p99 <= 1 ms)"
        )
        print(f"wrap peak RSS:                  {max(rss) / 1024:8.1f} MB     (goal <= 40 MB)")
        print(f"machine load average at the end: {load()}")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
