"""The benchmarks run from the project's own extras: nothing in ``bench/`` imports or runs
anything from ``tests/`` (issue 22).

``bench/broker.py --redis`` once failed without pytest, because it imported the tests'
redis-server harness, which imports pytest. What the benchmarks and the tests share lives in
``bench/`` (``_redis.py``, ``_process_tree.py``, ``_fake_app_server.py``) and the tests use
it from there; so do ``bench/tui.py``'s codex TUI driver and config (``_codex_tui.py``), fake
model (``_fake_model.py``) and stand-in codex (``_fake_codex_tui.py``), and
``bench/claude_spinner.py``'s Claude Code driver (``_claude_driver.py``) and fake Anthropic
API (``_fake_anthropic.py``). Each script is read,
not run: an import of ``tests``, or a path into ``tests/support``, is what would tie it to
the test dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def ties_to_tests(source: str) -> list[str]:
    """What in ``source`` imports from ``tests`` or names a path into it, one line each."""
    tree = ast.parse(source)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = []
        found.extend(
            (node.lineno, f"imports {name}")
            for name in names
            if name == "tests" or name.startswith("tests.")
        )
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and (node.value == "tests" or "tests/support" in node.value)
        ):
            found.append((node.lineno, f"names the path {node.value!r}"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


@pytest.mark.parametrize(
    "script",
    sorted(BENCH.glob("*.py")),
    ids=lambda p: p.name,
)
def test_no_benchmark_imports_or_runs_anything_of_the_tests(script: Path) -> None:
    assert ties_to_tests(script.read_text(encoding="utf-8")) == []


def test_the_check_finds_an_import_and_a_path_into_the_tests() -> None:
    source = (
        '"""Uses tests/support/x.py, in words only."""\n'
        "import sys\n"
        "from tests.support.redis_server import RedisServer\n"
        "import tests\n"
        'TREE = ROOT / "tests" / "support" / "tree.py"\n'
        'FAKE = [sys.executable, "tests/support/fake.py"]\n'
        "from _redis import RedisServer\n"
    )
    assert ties_to_tests(source) == [
        "line 3: imports tests.support.redis_server",
        "line 4: imports tests",
        "line 5: names the path 'tests'",
        "line 6: names the path 'tests/support/fake.py'",
    ]


def test_the_broker_bench_says_which_limit_a_run_is_past_in_one_line() -> None:
    """``bench/broker.py --members N`` names the limit it would stop at (issue 37: 5,000
    members ended in a heap of ConnectionResetError tracebacks), before it starts."""
    from bench._limits import Needs, connections_for, where_it_stops

    def stops(
        streams: int,
        fd_hard_limit: int = 20_000,
        port_range: tuple[int, int] = (32768, 60999),
        max_connections: int = 20_512,
    ) -> str | None:
        return where_it_stops(
            Needs(streams=streams, load=16),
            fd_hard_limit=fd_hard_limit,
            port_range=port_range,
            max_connections=max_connections,
        )

    assert stops(10_100) is None
    said = {
        "file descriptors": stops(24_000),
        "ephemeral ports": stops(12_100, fd_hard_limit=1 << 20, port_range=(50000, 60000)),
        "the broker's --max-connections": stops(5_100, max_connections=4096),
    }
    for limit, line in said.items():
        assert line is not None and line.startswith(limit), (limit, line)
        assert "\n" not in line
    assert stops(5_100, max_connections=connections_for(5_000)) is None  # the bench's own
