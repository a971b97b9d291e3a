"""The benchmark scripts as processes: what the unit tier (tests/unit/test_bench.py, pure)
cannot check without starting one."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_the_tui_benchmark_loads_without_pytest() -> None:
    """``bench/tui.py`` imports its harness at the top: with pytest unimportable, it loads
    and parses its options."""
    import subprocess
    import sys

    script = (
        "import runpy, sys; sys.modules['pytest'] = None; sys.argv = ['tui.py', '--help']; "
        f"runpy.run_path({str(BENCH / 'tui.py')!r}, run_name='__main__')"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "--baseline PYTHON" in out.stdout
