"""``codex-presence demo``: the README's first command, end to end in a subprocess."""

from __future__ import annotations

import subprocess
import sys

from codex_presence.cli.demo import DEFAULT_FIXTURE, bundled_fixtures


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codex_presence", "demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_default_session_is_bundled() -> None:
    assert DEFAULT_FIXTURE in bundled_fixtures()
    listed = demo("--list")
    assert listed.returncode == 0 and DEFAULT_FIXTURE in listed.stdout.split()


def test_demo_shows_the_roster_live_and_ends_with_roster_and_timeline() -> None:
    result = demo("--speed", "4")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    live, _, summary = out.partition("final roster:")
    # While it played, the live roster showed the agent connected, working and blocked.
    assert "codex-agent [engineer] connected=1" in live
    assert "working" in live and "needs input" in live
    # The end: the final roster in the design's text and the timeline of the session.
    assert "team demo roster:\n- codex-agent [engineer] offline\n" in summary
    assert "- alice (you) [director] [admin] connected=1" in summary
    timeline = [line.split() for line in summary.splitlines() if line.startswith("  ")]
    states = [fields[1] for fields in timeline]
    assert states[0] == "working" and states[-1] == "idle" and "blocked" in states
    assert result.stderr == ""


def test_unknown_session_is_a_usage_error() -> None:
    result = demo("--session", "nope")
    assert result.returncode == 2 and "--list" in result.stderr
