"""``codex-presence team init`` run as a person runs it: a real process, its standard output
redirected to a file or a terminal (a pseudo-terminal)."""

from __future__ import annotations

from pathlib import Path


def test_team_init_says_where_the_tokens_went(tmp_path: Path) -> None:
    """Before: ``team init … > tokens.tsv`` said "The tokens above are shown only now",
    though nothing was shown on screen. On a terminal, the tokens are above."""
    import os
    import pty
    import subprocess
    import sys

    command = [sys.executable, "-m", "codex_presence", "team", "init"]
    with (tmp_path / "tokens.tsv").open("w") as redirected:
        result = subprocess.run(
            [*command, str(tmp_path / "a.toml"), "-m", "alice"],
            stdout=redirected,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0
    assert "above" not in result.stderr
    assert "The tokens went to standard output" in result.stderr
    assert (tmp_path / "tokens.tsv").read_text().startswith("alice\tcp_")
    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [*command, str(tmp_path / "b.toml"), "-m", "alice"],
            stdout=follower,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 0
    assert "The tokens above are shown only now; the file keeps their sha256." in result.stderr
