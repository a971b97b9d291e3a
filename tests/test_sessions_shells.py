"""A shell killed mid-turn (SIGKILL) reads offline at once and idle after the broker's
session grace, not the TTL (issue 23, part 2): ``codex-presence codex`` with the real codex
TUI, and ``codex-presence claude`` with the real Claude Code, each running a long command
against a real broker on loopback (in memory and on a real redis-server).

On main the roster said "offline · working" for 26.6-26.8 s after such a kill. The times are
printed (``-s`` shows them), never bounded from above: the grace is told from the TTL by
cause, a broker TTL (:data:`FAR`) no wait here comes near, so only the grace can make the
member idle; the lower bound is the grace's own.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from bench._fake_anthropic import FakeAnthropic, Reply, bash, say, text
from bench._fake_model import FakeModel
from codex_presence._wire import SESSION_GRACE, TOKEN_ENV
from codex_presence.agent.watchdog import descendants
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.claude_presence import interactive_presence
from tests.support.claude_scenarios import LONG
from tests.support.tui_driver import (
    COMPOSER,
    PRESENCE_MARKER,
    READY,
    Tui,
    pane_process,
    presence_command,
    short_tempdir,
    tui_home,
)
from tests.support.tui_scenarios import NO_APPROVALS, _long_command_steps
from tests.support.waiting import WAIT, eventually

pytestmark = pytest.mark.slow

FAR = 600.0
"""The broker's TTL in the kill tests: far beyond any wait, so idle is the grace's doing."""
MUST = 60.0
"""The deadline of a wait for what must happen (load only stretches it)."""


def alice(broker: RunningBroker) -> dict[str, object]:
    rows = httpx.get(broker.url + "/roster", headers=broker.auth("bob"), trust_env=False).json()
    (row,) = [r for r in rows if r["name"] == "alice"]
    return dict(row)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def killed_reads_idle(broker: RunningBroker, pid: int, shell: str, store: str) -> None:
    """SIGKILL ``pid`` while alice works; wait for offline, then idle; say how long. The
    broker's TTL is :data:`FAR`: only the grace can make her idle."""
    assert alice(broker).get("activity") == "working"
    os.kill(pid, signal.SIGKILL)
    offline = eventually(lambda: alice(broker)["connected"] == 0, MUST)
    idle = eventually(lambda: "activity" not in alice(broker), MUST, "idle") + offline
    print(f"\n[{store}] SIGKILL of {shell}: offline after {offline:.3f} s, idle after {idle:.3f} s")
    assert idle >= SESSION_GRACE * 0.9  # the grace was given


def test_the_codex_shell_killed_mid_turn(codex: Path, store_url: str | None) -> None:
    model = FakeModel(_long_command_steps())
    with (
        short_tempdir() as tmp,
        model.serve(),
        running_broker(team=make_team("alice", "bob"), redis=store_url, activity_ttl=FAR) as broker,
    ):
        home = tui_home(tmp, model.base_url, NO_APPROVALS)
        argv = presence_command(codex, "--broker", broker.url, "--name", "alice")
        tui = Tui(argv, env={**home.env, TOKEN_ENV: token_of("alice")}, cwd=home.work, sock_dir=tmp)
        try:
            tui.wait_for(READY)
            eventually(lambda: alice(broker)["connected"] == 1, 60, "subscribed")
            tui.wait_for(COMPOSER)
            tui.prompt("sleep a while")
            tui.wait_for("esc to interrupt")
            eventually(lambda: alice(broker).get("activity") == "working", 60, "working")
            command = pane_process(tui, PRESENCE_MARKER)
            killed_reads_idle(broker, command, "codex", "redis" if store_url else "memory")
        finally:
            tui.close()


@pytest.mark.claude
def test_the_claude_shell_killed_mid_turn(
    claude: Path, tmp_path: Path, store_url: str | None
) -> None:
    api = FakeAnthropic(
        [
            Reply(blocks=[text("Waiting."), bash(LONG, id="toolu_kill")]),
            say("unused"),
        ]
    )
    args = ("--permission-mode", "default", "--allowedTools", "Bash")
    with (
        running_broker(team=make_team("alice", "bob"), redis=store_url, activity_ttl=FAR) as broker,
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url, claude_args=args) as (
            s,
            _,
        ),
    ):
        s.ready()
        eventually(lambda: alice(broker)["connected"] == 1, 60, "subscribed")
        s.prompt("wait a while")
        s.tmux.wait_screen(r"sleep 30")
        eventually(lambda: alice(broker).get("activity") == "working", 60, "working")
        marker = b"\0-m\0codex_presence\0claude\0"
        pane = s.tmux.pane_pid()
        assert pane is not None
        python = os.fsencode(sys.executable) + b"\0"
        found = [
            pid
            for pid in {pane, *descendants(pane)}
            if marker in (cmdline := Path(f"/proc/{pid}/cmdline").read_bytes())
            and cmdline.startswith(python)
        ]
        (command,) = [pid for pid in found if _parent(pid) not in found]  # not its watchdog
        killed_reads_idle(broker, command, "claude", "redis" if store_url else "memory")


@pytest.mark.claude
def test_a_claude_and_a_wrap_of_one_member_show_the_strongest(
    claude: Path, tmp_path: Path, store_url: str | None
) -> None:
    """Two sessions of one member, two kinds of runner: a real Claude Code session and a
    wrap. The wrap's turn waits on an approval (blocked) while claude runs a turn and ends
    it: the member stays blocked at every step, with one session working then none; once
    the approval is answered and the wrap's turn ends, the member is idle (issue 23)."""
    from tests.support.wrap_harness import WrapProcess, is_note, is_request

    api = FakeAnthropic(
        [Reply(blocks=[text("Checking."), bash("sleep 2", id="toolu_s")]), say("Done.")]
    )
    args = ("--permission-mode", "default", "--allowedTools", "Bash")
    with (
        running_broker(team=make_team("alice", "bob"), redis=store_url) as broker,
        api.serve(),
        WrapProcess(
            ["--broker", broker.url, "--name", "alice"], env={TOKEN_ENV: token_of("alice")}
        ) as wrap,
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url, claude_args=args) as (
            s,
            _,
        ),
    ):
        s.ready()
        eventually(lambda: alice(broker)["connected"] == 2, 60, "both subscribed")
        wrap.start_turn(1, approval=True, deltas=1)
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        eventually(lambda: alice(broker).get("activity") == "blocked", 60, "blocked")
        assert "sessions" not in alice(broker)  # one busy session: nothing more to say

        s.prompt("check something")
        s.tmux.wait_screen(r"sleep 2")
        eventually(lambda: alice(broker).get("sessions") == {"working": 1, "blocked": 1}, 60)
        assert alice(broker)["activity"] == "blocked"  # the strongest, whatever claude does
        s.tmux.wait_screen(r"Done\.")
        eventually(lambda: "sessions" not in alice(broker), WAIT, "claude's turn over")
        assert alice(broker)["activity"] == "blocked"  # claude's idle hides nothing

        wrap.send({"id": request["id"], "result": {"decision": "accept"}})
        wrap.wait_for(is_note("turn/completed"))
        eventually(lambda: "activity" not in alice(broker), WAIT, "both idle")
        assert alice(broker)["connected"] == 2
