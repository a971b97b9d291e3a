"""wrap's cost as a pipe: throughput on realistic and worst-case streams, added latency per
message, peak memory (issues 3, 13 and 14).

    python bench/relay.py [--mb 128] [--messages 3000] [--runs 3] [--baseline PYTHON]

In one run it prints:

* throughput: ``cat FILE | <middle> | sink``, where the middle is ``codex-presence wrap --
  cat`` or the plain pipeline ``cat | cat``; the sink (the same Python reader for both)
  times the first to the last byte, so wrap's start-up is not counted. Median of
  ``--runs``; the ratio wrap / plain. Streams of ``--mb`` MB each:

  - realistic: turns of 0.169.0 app-server messages, mostly deltas (bench/_streams.py);
    with ``--baseline PYTHON`` the same through ``PYTHON -m codex_presence wrap`` too (the
    code before a change, from its own checkout), in the same runs;
  - worst cases: 2-byte lines (``x\n``), bare newlines, and lines of 16 MB (a command's
    output in one ``item/completed``: each is buffered and parsed, as it can change the
    state).
* ``wrap -- yes | head -c 10``: how long wrap takes to exit after ``head`` did (its reader
  gone, wrap must end its child and itself).
* a SIGKILLed wrap: how long its child's tree outlives it (bench/_process_tree.py:
  a command in the child's group, one in a session of its own, an orphan).
* ``wrap --record`` with one 100 MB line: wrap's peak RSS, and what the recording keeps of
  the line (an ``oversized`` line with its size).
* added latency: a child writes one message per millisecond, each stamped with
  CLOCK_MONOTONIC; a reader stamps its arrival. Direct (the reader spawns the child) vs
  through wrap; p50 and p99 of each, and the difference.
* wrap's peak RSS (``ru_maxrss`` of the wrap process) over the realistic throughput runs.
* wrap's own CPU time (user + sys) per MB relayed, next to the middle ``cat``'s of the
  plain pipeline (``wait4`` counts wrap's child ``cat`` in wrap's figure: it is
  subtracted, as is wrap's start-up, measured on a one-line session), and the machine's
  load: on a shared 2-core machine the throughput swings with other work, the CPU cost
  much less.
* where the time goes, in the same runs: wrap with its analysis switched off (the relay
  alone) and with the mapping inert (the pre-filter alone), patched in for the benchmark
  only; and the analysis alone (pre-filter + mapping on the same stream, in-process).

Goals: realistic ratio ≥ 0.5 (issue 3) and not below the baseline's (issue 13); 2-byte
lines ≥ 50 MB/s; ``yes | head`` exits within 0.5 s of ``head``; added p99 ≤ 1 ms; RSS ≤ 40
MB; with ``--record`` and a 100 MB line, RSS < 100 MB; a SIGKILLed wrap's tree gone within
1 s (issue 14).
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

from _python import installed_like
from _streams import turn_lines

ENVIRON = dict(os.environ)

PY = sys.executable
WRAP = [PY, "-m", "codex_presence", "wrap", "--quiet", "--"]


def patched_wrap(patch: str) -> list[str]:
    """``wrap`` with ``patch`` applied first: a diagnostic, never the product."""
    run = "import sys; from codex_presence.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return [PY, "-c", f"{patch}; {run}", "wrap", "--quiet", "--"]


VARIANTS = {
    "relay alone (no analysis)": patched_wrap(
        "import codex_presence.core.codex.prefilter as m; "
        "m.ChunkAnalyzer.feed = lambda self, d, c: []"
    ),
    "pre-filter alone (inert mapping)": patched_wrap(
        "import codex_presence.core.codex.mapping as m; "
        "m.CodexMapping.feed_line = lambda self, d, l: None"
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
time.sleep(float(sys.argv[2]))  # wrap's start-up apart: the steady state is measured
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


BIG_LINE_HEAD = (
    b'{"method":"item/completed","params":{"threadId":"t","turnId":"u","item":'
    b'{"type":"commandExecution","id":"c","status":"completed","aggregatedOutput":"'
)


def big_line(size: int) -> bytes:
    """One ``item/completed`` line of ``size`` bytes (newline included): a line that may
    change the state, so the analysis must buffer and parse it whole."""
    tail = b'"}}}\n'
    return BIG_LINE_HEAD + b"x" * (size - len(BIG_LINE_HEAD) - len(tail)) + tail


WORST_CASES = {
    "2-byte lines": lambda: b"x\n" * (1 << 19),
    "bare newlines": lambda: b"\n" * (1 << 20),
    "16 MB lines": lambda: big_line(16_000_000),
}


def make_worst_stream(path: Path, unit: bytes, megabytes: int) -> int:
    size = 0
    with path.open("wb") as f:
        while size < megabytes * 1_000_000:
            f.write(unit)
            size += len(unit)
    return size


START_UP = 3.0
"""Seconds the source waits before it writes: wrap's analysis is loaded by then, and the
stream measures the session's steady state (bench/startup.py measures the start)."""

USAGE = r"""
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs a command and writes its peak RSS (KB) and CPU seconds to a file. ``wait4`` in the
benchmark itself would not do: a process spawned with vfork takes its parent's peak RSS
as its own at exec, and the benchmark's is large. This small process's is far below
wrap's."""


def usage_of(argv: list[str], path: Path) -> list[str]:
    """``argv``, run so that its peak RSS and CPU time end up in ``path`` (see USAGE)."""
    return [PY, "-c", USAGE, str(path), *argv]


def read_usage(path: Path) -> tuple[int, float]:
    rss, cpu = path.read_text().split()
    return int(rss), float(cpu)


def pipeline(source: Path, middle: list[list[str]]) -> tuple[int, float, tuple[int, float]]:
    """cat source | middle... | sink, the source starting after :data:`START_UP`; (bytes at
    the sink, first-to-last-byte seconds, (peak RSS in KB, CPU seconds) of the first middle
    process)."""
    procs: list[subprocess.Popen[bytes]] = []
    src = subprocess.Popen(
        ["sh", "-c", f'sleep {START_UP}; exec cat "$0"', str(source)], stdout=subprocess.PIPE
    )
    procs.append(src)
    upstream = src.stdout
    with tempfile.NamedTemporaryFile(prefix="bench-usage-") as usage:
        for n, argv in enumerate(middle):
            measured = usage_of(argv, Path(usage.name)) if n == 0 else argv
            p = subprocess.Popen(measured, stdin=upstream, stdout=subprocess.PIPE)
            assert upstream is not None
            upstream.close()
            upstream = p.stdout
            procs.append(p)
        sink = subprocess.Popen([PY, "-c", SINK], stdin=upstream, stdout=subprocess.PIPE)
        assert upstream is not None
        upstream.close()
        out, _ = sink.communicate(timeout=600)
        for p in procs:
            assert p.wait(60) == 0, (p.args, p.returncode)
        rss_cpu = read_usage(Path(usage.name))
    total, seconds = out.split()
    return int(total), float(seconds), rss_cpu


SAYS_ONE_THING = [PY, "-c", 'print(\'{"method":"turn/started","params":{}}\')']
"""A child that writes one line that may matter, and ends: wrap loads all it loads for a
session (a child that says nothing that could matter spares it that)."""


def start_up_cpu(wrap: list[str]) -> float:
    """CPU seconds of a whole session of ``wrap`` with :data:`SAYS_ONE_THING` (its child's
    figure taken off): imports and set-up, to subtract from a run."""
    costs = []
    for argv in ([*wrap, *SAYS_ONE_THING], SAYS_ONE_THING):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        costs.append(usage.ru_utime + usage.ru_stime)
    return costs[0] - costs[1]


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
    from codex_presence.core.codex.mapping import CodexMapping, Direction
    from codex_presence.core.codex.prefilter import ChunkAnalyzer

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


def throughput(stream: Path, size: int, argv: list[str]) -> tuple[float, tuple[int, float]]:
    """MB/s of ``cat stream | argv | sink``, and (peak RSS KB, CPU s) of ``argv``."""
    total, seconds, usage = pipeline(stream, [argv] if argv[0] != "cat" else [["cat"], argv])
    assert total == size and usage is not None, (total, size)
    return size / seconds / 1e6, usage


def yes_head_exit() -> float:
    """Seconds from ``head``'s exit to wrap's, in ``wrap -- yes | head -c 10``."""
    wrap = subprocess.Popen([*WRAP, "yes"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    head = subprocess.Popen(["head", "-c", "10"], stdin=wrap.stdout, stdout=subprocess.DEVNULL)
    assert wrap.stdout is not None
    wrap.stdout.close()
    head.wait(30)
    after_head = time.perf_counter()
    wrap.wait(30)
    return time.perf_counter() - after_head


TREE = Path(__file__).resolve().parent / "_process_tree.py"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def tree_outlives_sigkill() -> float:
    """Seconds the child's tree (a command in its process group, one in a session of its
    own, an orphan: bench/_process_tree.py) outlives a SIGKILLed wrap."""
    wrap = subprocess.Popen(
        [*WRAP, PY, str(TREE), "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert wrap.stdout is not None
    pids = [int(pid) for pid in wrap.stdout.readline().split()]
    assert len(pids) == 4 and all(alive(pid) for pid in pids)
    wrap.kill()
    killed = time.perf_counter()
    wrap.wait()
    while any(alive(pid) for pid in pids):
        assert time.perf_counter() - killed < 30, "the tree outlived wrap"
        time.sleep(0.001)
    return time.perf_counter() - killed


def record_a_long_line(tmp: Path, megabytes: int) -> tuple[float, str]:
    """``wrap --record FILE -- cat`` on one line of ``megabytes`` MB: wrap's peak RSS (MB;
    its ``cat``'s is far smaller), and what the recording says in the line's place."""
    from codex_presence.core.recording import read_entries

    line, recording = tmp / "long-line.jsonl", tmp / "long-line.rec.jsonl"
    line.write_bytes(big_line(megabytes * 1_000_000))
    usage = tmp / "long-line.usage"
    late_cat = ["sh", "-c", f'sleep {START_UP}; exec cat "$0"', str(line)]  # wrap loaded
    argv = [*WRAP[:-2], "--quiet", "--record", str(recording), "--", *late_cat]
    proc = subprocess.Popen(usage_of(argv, usage), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    got = 0
    while chunk := proc.stdout.read(1 << 20):
        got += len(chunk)
    proc.stdout.close()
    assert proc.wait(60) == 0 and got == line.stat().st_size
    with recording.open("rb") as f:
        kept = [
            f"a gap of {e.gap:,} bytes"
            if e.gap
            else f"an oversized line of {e.size:,} bytes"
            if e.message is None and e.raw is None and e.size
            else f"a message of {e.size or 0:,} bytes"
            for e in read_entries(f)
            if not e.end
        ]
    line.unlink()
    return read_usage(usage)[0] / 1024, "; ".join(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=128, help="stream size in MB (≥ 100)")
    parser.add_argument("--messages", type=int, default=3000, help="latency messages")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline", metavar="PYTHON", help="also PYTHON -m codex_presence wrap (realistic)"
    )
    args = parser.parse_args()
    baseline = (
        [args.baseline, "-m", "codex_presence", "wrap", "--quiet", "--"] if args.baseline else None
    )

    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        os.environ.clear()  # every command below runs as installed (see _python.py)
        os.environ.update(installed_like(ENVIRON, Path(tmp) / "pycache"))
        for warm in [WRAP] if baseline is None else [WRAP, baseline]:  # compiles them
            subprocess.run([*warm, *SAYS_ONE_THING], check=True, stdout=subprocess.DEVNULL)
        stream = Path(tmp) / "stream.jsonl"
        size, delta_share = make_stream(stream, args.mb)
        print(f"stream: {size / 1e6:.0f} MB of app-server JSONL, {delta_share:.0%} deltas")

        print(f"machine: {os.cpu_count()} CPUs, load average {load()} (other work skews figures)")
        plain, wrapped, olds, rss, cpu, cat_cpu = [], [], [], [], [], []
        variants: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.runs):
            rate, usage = throughput(stream, size, ["cat"])
            plain.append(rate)
            cat_cpu.append(usage[1])
            rate, usage = throughput(stream, size, [*WRAP, "cat"])
            wrapped.append(rate)
            rss.append(usage[0])
            cpu.append(usage[1])
            if baseline is not None:
                olds.append(throughput(stream, size, [*baseline, "cat"])[0])
            for name, argv in VARIANTS.items():
                variants[name].append(throughput(stream, size, [*argv, "cat"])[0])
        p, w = statistics.median(plain), statistics.median(wrapped)
        runs = {
            name: ", ".join(f"{v:.0f}" for v in values)
            for name, values in (("plain", plain), ("wrap", wrapped), ("baseline", olds))
        }
        print(f"throughput  cat | cat:          {p:8.0f} MB/s   (runs: {runs['plain']})")
        print(f"throughput  wrap -- cat:        {w:8.0f} MB/s   (runs: {runs['wrap']})")
        print(f"ratio wrap / plain:             {w / p:8.2f}      (goal >= 0.5)")
        if olds:
            o = statistics.median(olds)
            print(
                f"  baseline wrap:                {o:8.0f} MB/s   ratio {o / p:4.2f}"
                f"   (runs: {runs['baseline']}; goal: wrap's ratio at least this)"
            )
        for name, values in variants.items():
            v = statistics.median(values)
            print(f"  diagnostic, {name + ':':34s} {v:5.0f} MB/s   ratio {v / p:4.2f}")
        start = statistics.median(start_up_cpu(WRAP) for _ in range(3))
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
        stream.unlink()

        print("worst cases (same size, same runs):")
        for name, unit in WORST_CASES.items():
            worst = Path(tmp) / "worst.bin"
            worst_size = make_worst_stream(worst, unit(), args.mb)
            rates = [
                (
                    throughput(worst, worst_size, ["cat"])[0],
                    throughput(worst, worst_size, [*WRAP, "cat"])[0],
                )
                for _ in range(args.runs)
            ]
            cat_rate = statistics.median(r[0] for r in rates)
            wrap_rate = statistics.median(r[1] for r in rates)
            goal = "   (goal >= 50 MB/s)" if name == "2-byte lines" else ""
            print(
                f"  {name + ':':16s} wrap {wrap_rate:6.0f} MB/s, cat | cat {cat_rate:6.0f} MB/s,"
                f" ratio {wrap_rate / cat_rate:4.2f}{goal}"
            )
            worst.unlink()

        exits = [yes_head_exit() for _ in range(5)]
        print(
            f"wrap -- yes | head -c 10: wrap exits {statistics.median(exits):.2f} s after head"
            f" (median of 5; max {max(exits):.2f} s; goal < 0.5 s)"
        )
        lives = [tree_outlives_sigkill() for _ in range(5)]
        print(
            f"SIGKILLed wrap: its child's tree gone {1e3 * statistics.median(lives):.0f} ms later"
            f" (median of 5; max {1e3 * max(lives):.0f} ms; goal < 1 s)"
        )
        peak, kept = record_a_long_line(Path(tmp), 100)
        print(
            f"wrap --record, one 100 MB line: peak RSS {peak:.1f} MB (goal < 100 MB); kept: {kept}"
        )

        ticker = [PY, "-c", TICKER, str(args.messages), str(START_UP)]
        direct = latencies(ticker, args.messages)
        through = latencies([*WRAP, *ticker], args.messages)
        measured = {"direct": direct, "through wrap": through}
        if baseline is not None:
            measured["baseline wrap"] = latencies([*baseline, *ticker], args.messages)
        for name, values in measured.items():
            p50, p99 = pct(values, 0.5), pct(values, 0.99)
            print(f"latency {name:13s}           p50 {p50:6.3f} ms   p99 {p99:6.3f} ms")
        for name, values in measured.items():
            if name != "direct":
                added50 = pct(values, 0.5) - pct(direct, 0.5)
                added99 = pct(values, 0.99) - pct(direct, 0.99)
                print(
                    f"added latency, {name.removeprefix('through '):13s}   p50 {added50:6.3f} ms"
                    f"   p99 {added99:6.3f} ms"
                    + ("   (goal p99 <= 1 ms)" if name == "through wrap" else "")
                )
        print(f"wrap peak RSS (realistic):      {max(rss) / 1024:8.1f} MB     (goal <= 40 MB)")
        print(f"machine load average at the end: {load()}")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
