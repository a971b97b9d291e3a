"""``codex-presence demo``: the README's first command, end to end in a subprocess."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import httpx

from codex_presence.broker.web import COOKIE_NAME, KEY_HEADER
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
    # The broker's address and a member token, to open the roster page meanwhile.
    first = out.splitlines()[0]
    match = re.search(
        r"broker (http://127\.0\.0\.1:\d+) .* as alice with the token (cp_\S+)$", first
    )
    assert match is not None, first
    # While it played, the live roster showed the agent connected, working and blocked,
    # and said what the session was doing, in words from the recording.
    assert "codex-agent [engineer] connected=1" in live
    assert "working · " in live and "needs input · " in live
    # The session played once the live view showed the roster, not before: its first
    # states were not over before the view's stream was open (on a loaded machine they
    # were, and it showed no "needs input").
    assert live.index("team demo roster:") < live.index("  > "), live[:400]
    told = [line.removeprefix("  > ") for line in live.splitlines() if line.startswith("  > ")]
    assert told[:2] == [
        "the user asks: “please run the build”",
        "codex works on “please run the build”",
    ]
    assert (
        "codex asks to run `for i in 1 2 3; do echo step $i; sleep 1; done` — waiting for approval"
        in told
    )
    assert told.index("the command approved") > told.index("codex says: “Let me check the build.”")
    assert told[-1] == "turn completed"
    # The end: the final roster, which the live view's last frame showed word for word
    # (before, it was printed again in full), and the timeline of the session, each cause
    # an event a person knows.
    last_frame = live.rstrip().rpartition("team demo roster:")[2]
    assert "\n- codex-agent [engineer] offline\n" in last_frame
    assert "- alice (you) [director] [admin] connected=1" in last_frame
    assert summary.startswith(" as last shown above.\n")
    assert "team demo roster:" not in summary
    timeline = [line.split(maxsplit=2) for line in summary.splitlines() if line.startswith("  ")]
    assert [(state, words) for _, state, words in timeline] == [
        ("working", "turn started"),
        ("blocked", "approval requested"),
        ("working", "answered: working again"),
        ("idle", "turn over"),
        ("working", "turn started"),
        ("idle", "turn over"),
    ]
    assert result.stderr == ""


def read_ready(fd: int) -> bytes:
    """What the terminal holds now (nothing once the demo and its terminal are gone)."""
    got = b""
    with contextlib.suppress(OSError):  # the terminal is gone with its last writer
        while select.select([fd], [], [], 0.1)[0] and (chunk := os.read(fd, 65536)):
            got += chunk
    return got


def test_ctrl_c_ends_the_demo_at_once_without_a_word_of_reconnecting() -> None:
    """On a terminal: the address and token stay on top of every frame; Ctrl-C ends the
    session and the watcher before the embedded broker, so nothing says it went away."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the demo on a terminal
        os.execv(sys.executable, [sys.executable, "-m", "codex_presence", "demo"])
    screen = b""
    asks = b"> codex asks to run `for i in 1 2 3; do echo step $i; sleep 1; done`"

    def last_frame() -> bytes:
        return screen.rsplit(b"\x1b[H\x1b[J", 1)[-1]

    try:
        # A frame with the wait on the roster and the request above it (the demo shows
        # the blocked state, then tells the request that made it, in the next frames).
        deadline = time.monotonic() + 60
        while not (b"needs input" in last_frame() and asks in last_frame()):
            assert time.monotonic() < deadline, screen
            ready, _, _ = select.select([fd], [], [], 1)
            if ready:
                screen += os.read(fd, 65536)
        frame = last_frame().decode()
        assert frame.startswith("codex-presence demo: broker http://127.0.0.1:"), frame
        assert "> codex asks to run `for i in 1 2 3; do echo step $i; sleep 1; done`" in frame
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 120  # told to end: generous for a loaded machine
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            screen += read_ready(fd)
        screen += read_ready(fd)  # what it wrote last
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the demo did not end on Ctrl-C")
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(done[1]) == 130
    after = screen.rsplit(b"\x1b[H\x1b[J", 1)[1].decode()
    for word in ("reconnecting", "offline:", "Traceback", "Exception"):
        assert word not in after, after


def test_unknown_session_is_a_usage_error() -> None:
    result = demo("--session", "nope")
    assert result.returncode == 2 and "--list" in result.stderr


def test_the_demos_address_serves_the_page_and_its_token_signs_in() -> None:
    """What the demo's first line tells a person to do: open the address (the roster
    page, not a 404) and sign in with the token it shows, over real HTTP."""
    child = subprocess.Popen(
        [sys.executable, "-m", "codex_presence", "demo", "--loop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        match = re.search(r"broker (http://127\.0\.0\.1:\d+) .* with the token (cp_\S+)$", first)
        assert match is not None, (first, child.poll())
        url, token = match.groups()
        page = httpx.get(url + "/", timeout=60)
        assert page.status_code == 200, page.text
        assert "text/html" in page.headers["content-type"]
        signed_in = httpx.post(url + "/session", data={"token": token}, timeout=60)
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["name"] == "alice"
        session = {
            "cookie": f"{COOKIE_NAME}={signed_in.cookies[COOKIE_NAME]}",
            KEY_HEADER: signed_in.json()["key"],
        }
        who = httpx.get(url + "/whoami", headers=session, timeout=60)
        assert who.status_code == 200 and who.json()["name"] == "alice", who.text
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        if child.stderr is not None:
            child.stderr.close()
