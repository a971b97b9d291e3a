"""Issue 32's "done when", end to end: runners report which agent, where, and what it waits
on; the broker lists the member's agents; ``roster``, the MCP tool and a notification say
it. Real wraps (``codex-presence wrap`` around the scripted app-server, as the other wrap
tests), a real broker on loopback, the real ``roster`` command. (The page's side is
``tests/test_web.py``'s ``test_each_agent_has_a_line_under_its_member_and_markup_never_runs``.)
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.config import Target
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.cli import runner
from codex_presence.client.link import BrokerLink, BrokerSettings, project_of
from codex_presence.client.mcp_tool import RosterSource
from codex_presence.client.reporter import ActivityReporter
from codex_presence.core.activity import ActivityState, AgentFacts, Transition, Waits
from codex_presence.core.backoff import Backoff
from codex_presence.core.notify_policy import Rule
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    make_team,
    running_broker,
    shared_state,
    token_of,
)
from tests.support.gemini_driver import GEMINI_VERSION, require_gemini
from tests.support.receivers import receiver
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_note, is_request, wrap_env

TEAM = make_team("alice", "bob")
START = 1_800_000_000.0  # unix seconds: 2027-01-15 08:00:00 UTC
TOKEN = {"CODEX_PRESENCE_TOKEN": token_of("alice")}
APPROVAL = "item/commandExecution/requestApproval"


def alice(broker: RunningBroker) -> dict[str, Any]:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob"), timeout=10).json()
    (me,) = [p for p in roster if p["name"] == "alice"]
    return me  # type: ignore[no-any-return]


def agents_by_state(broker: RunningBroker) -> dict[str, dict[str, Any]]:
    return {a["state"]: a for a in alice(broker).get("agents") or []}


def projects(tmp_path: Path) -> tuple[Path, Path]:
    """``api-server/src`` in a git work tree (its project: the top-level's name) and
    ``web``, in none."""
    api = tmp_path / "api-server"
    (api / ".git").mkdir(parents=True)
    (api / "src").mkdir()
    web = tmp_path / "web"
    web.mkdir()
    return api / "src", web


def in_thread(wrap: WrapProcess, cwd: Path) -> None:
    """The client starts a thread in ``cwd``, as a codex client says where it works."""
    wrap.wait_online()
    wrap.send({"method": "thread/start", "id": 0, "params": {"cwd": str(cwd)}})
    wrap.wait_for(is_note("thread/started"))


@contextmanager
def two_wraps(broker: RunningBroker, *share: str) -> Iterator[tuple[WrapProcess, WrapProcess]]:
    options = ["--broker", broker.url, "--name", "alice", *share]
    with ExitStack() as stack:
        blocked = stack.enter_context(WrapProcess(options, env=TOKEN))
        working = stack.enter_context(WrapProcess(options, env=TOKEN))
        yield blocked, working


def roster_command(broker: RunningBroker) -> str:
    env = wrap_env({"CODEX_PRESENCE_TOKEN": token_of("bob")})
    done = subprocess.run(
        [sys.executable, "-m", "codex_presence", "roster", "--broker", broker.url, "--activity"],
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout.decode()


@contextmanager
def roster_watch(broker: RunningBroker) -> Iterator[bytearray]:
    """bob's ``roster --watch`` (a real subprocess on a real SSE stream): what it drew so
    far (not a terminal: each drawing follows the last)."""
    env = wrap_env({"CODEX_PRESENCE_TOKEN": token_of("bob")})
    command = [sys.executable, "-m", "codex_presence", "roster", "--broker", broker.url]
    proc = subprocess.Popen(
        [*command, "--watch"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    drawn = bytearray()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            drawn.extend(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield drawn
    finally:
        proc.terminate()
        proc.wait(WAIT)
        reader.join(WAIT)
        assert proc.stdout is not None
        proc.stdout.close()


def mcp_text(broker: RunningBroker) -> str:
    source = RosterSource(broker=broker.url, token=token_of("bob"))

    async def ask() -> str:
        return await source.text(activity=True)

    return anyio.run(ask)


def test_two_wraps_in_two_projects_show_as_two_agents_and_say_what_waits(
    tmp_path: Path,
) -> None:
    """One member, two wraps: one blocked on a command approval in ``api-server``, one
    working in ``web``. The roster lists both agents with their client and project; the
    blocked one waits on ``make`` by name, its arguments never sent at the default level;
    ``roster``, the MCP tool and a notification say so."""
    api, web = projects(tmp_path)
    clock = FakeClock(START)
    with receiver() as hook:
        notifier = Notifier(
            [Target(url=f"json://{hook.host}/h", rule=Rule(after=60))],
            team="acme",
            sender=AppriseSender(),
            clock=clock,
            max_sleep=0.01,
            recheck=0.05,
            backoff=lambda: Backoff(base=0.01, cap=0.05),
        )
        with (
            running_broker(team=TEAM, wall_clock=clock, watcher=notifier) as broker,
            two_wraps(broker) as (blocked, working),
            roster_watch(broker) as drawn,
        ):
            in_thread(blocked, api)
            in_thread(working, web)
            working.start_turn(1, finish="when_told")
            blocked.start_turn(1, approval=True)
            request = blocked.wait_for(is_request(APPROVAL))
            eventually(
                lambda: set(agents_by_state(broker)) == {"blocked", "working"},
                60,
                "two agents of alice, one blocked, one working",
            )
            eventually(lambda: "waits" in agents_by_state(broker)["blocked"], 60, "what waits")
            agents = agents_by_state(broker)
            host = socket.gethostname()[:64]
            assert agents["blocked"]["client"] == "codex-app-server"
            assert agents["blocked"]["project"] == "api-server"
            assert agents["blocked"]["version"] == "0.169.0"
            assert agents["blocked"]["host"] == host
            assert agents["blocked"]["waits"] == {
                "kind": "command",
                "tool": "shell",
                "program": "make",
            }
            assert agents["working"]["client"] == "codex-app-server"
            assert agents["working"]["project"] == "web"
            assert "waits" not in agents["working"] or agents["working"]["waits"] is None
            assert b"make test" not in orjson.dumps(alice(broker))  # no arguments

            said = roster_command(broker)  # how long: against this machine's clock, not the fake
            assert re.search(
                r"^  - codex-app-server in api-server: blocked \S+, approve `make`$", said, re.M
            ), said
            assert re.search(r"^  - codex-app-server in web: working \S+$", said, re.M), said
            watched = b"  \xc2\xb7 codex-app-server in api-server \xc2\xb7 [!] approve `make`"
            eventually(lambda: watched in drawn, 60, "roster --watch saying it")
            told = mcp_text(broker)
            assert re.search(
                r"^  - codex-app-server in api-server: blocked \S+, approve `make`$", told, re.M
            ), told

            clock.advance(60)
            eventually(lambda: hook.requests, 60, "the blocked notice")
            sent = hook.requests[0].json()
            assert sent["title"] == "alice · codex-app-server in api-server: approve `make`"

            blocked.send({"id": request["id"], "result": {"decision": "accept"}})
            blocked.wait_for(is_note("turn/completed"))
            working.send({"method": "fake/finish"})
            working.wait_for(is_note("turn/completed"))
            eventually(
                lambda: "blocked" not in agents_by_state(broker), 60, "the approval answered"
            )
            assert blocked.close() == 0 and working.close() == 0


def test_share_none_shows_the_state_alone_and_detail_the_command(tmp_path: Path) -> None:
    """``--share none``: the roster lists the agent by its state alone (nothing of the
    client, the host, the project or what waits leaves the machine), and the text has no
    agent line: the member's says the state; ``--share detail`` adds the command, on one
    line."""
    api, _ = projects(tmp_path)
    with running_broker(team=TEAM) as broker:
        for share, expected in (("none", None), ("detail", "make test")):
            options = ["--broker", broker.url, "--name", "alice", "--share", share]
            with WrapProcess(options, env=TOKEN) as wrap:
                in_thread(wrap, api)
                wrap.start_turn(1, approval=True)
                request = wrap.wait_for(is_request(APPROVAL))
                eventually(lambda: "blocked" in agents_by_state(broker), 60, "blocked")
                agent = agents_by_state(broker)["blocked"]
                if expected is None:
                    assert set(agent) <= {"session", "state", "since", "background"}, agent
                    said = roster_command(broker)  # the member's line alone says the state
                    assert re.search(r"^- alice .*connected=1 blocked \S+$", said, re.M), said
                    assert len(said.splitlines()) == 3, said
                    assert "api-server" not in said and socket.gethostname() not in said
                else:
                    eventually(lambda: "waits" in agents_by_state(broker)["blocked"], 60, "waits")
                    waits = agents_by_state(broker)["blocked"]["waits"]
                    assert waits["detail"] == expected and waits["program"] == "make"
                wrap.send({"id": request["id"], "result": {"decision": "accept"}})
                wrap.wait_for(is_note("turn/completed"))
                assert wrap.close() == 0
            eventually(lambda: not alice(broker).get("agents"), 60, "the session gone")


def test_the_project_is_the_git_top_levels_name_else_the_directorys(tmp_path: Path) -> None:
    api, web = projects(tmp_path)
    assert project_of(str(api)) == "api-server"
    assert project_of(str(api.parent)) == "api-server"
    assert project_of(str(web)) == "web"
    worktree = tmp_path / "feature"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere\n")  # a work tree's .git is a file
    assert project_of(str(worktree)) == "feature"
    assert project_of(str(tmp_path)) == tmp_path.name


def test_a_transition_the_mapping_did_not_make_keeps_what_it_said(tmp_path: Path) -> None:
    """The analysis guard's idle after a bug (or the demo's) carries no facts: the record
    keeps the version and the project the mapping said, and loses only what waited."""
    api, _ = projects(tmp_path)
    settings = BrokerSettings(url="http://127.0.0.1:9", token="unused", client="claude")
    link = BrokerLink(settings)
    said = Transition(
        ActivityState.IDLE,
        ActivityState.BLOCKED,
        "PermissionRequest",
        waits=Waits("command", "Bash", "make test"),
        facts=AgentFacts("2.1.332", str(api)),
    )

    async def observed() -> list[Any]:
        async with httpx.AsyncClient() as client:
            link.reporter = ActivityReporter(client=client, session="s")
            seen = []
            for transition in (said, Transition(ActivityState.BLOCKED, ActivityState.IDLE, "bug")):
                link.observe(transition)
                seen.append(link.reporter.policy.agent)
            return seen

    blocked, after = anyio.run(observed)
    host = socket.gethostname()[:64]
    assert blocked == {
        "client": "claude",
        "version": "2.1.332",
        "host": host,
        "project": "api-server",
        "waits": {"kind": "command", "tool": "Bash", "program": "make"},
    }
    assert after == {
        "client": "claude",
        "version": "2.1.332",
        "host": host,
        "project": "api-server",
    }


def test_a_broker_that_reads_the_roster_anew_still_says_which_agent_waits(
    redis_url: str,
) -> None:
    """A broker that starts on a shared store where a member is already blocked (it reads
    the whole roster, no report needed) tells of the wait with the agent and what it waits
    on: the notifier is given the stored agents with the re-read, not only with a report."""
    clock = FakeClock(START)
    agent = {"client": "claude", "project": "api-server", "waits": {"kind": "question"}}
    with receiver() as hook:
        first = shared_state(redis_url, TEAM)
        with running_broker(team=TEAM, wall_clock=clock, store=first.store) as broker:
            body = {"state": "blocked", "session": "sessionAAAAAAAAA", "agent": agent}
            response = httpx.post(
                broker.url + "/presence/activity", json=body, headers=broker.auth("alice")
            )
            assert response.status_code == 204, response.text
        notifier = Notifier(
            [Target(url=f"json://{hook.host}/h", rule=Rule(after=60))],
            team="acme",
            sender=AppriseSender(),
            clock=clock,
            max_sleep=0.01,
            recheck=0.05,
            backoff=lambda: Backoff(base=0.01, cap=0.05),
        )
        second = shared_state(redis_url, TEAM)
        with running_broker(team=TEAM, wall_clock=clock, store=second.store, watcher=notifier):
            eventually(lambda: notifier.policy.blocked_since("alice") is not None, 60, "read")
            clock.advance(60)
            eventually(lambda: hook.requests, 60, "the blocked notice")
    assert hook.requests[0].json()["title"] == "alice · claude in api-server: answer a question"


def test_a_session_that_never_says_its_version_has_the_installed_one(
    codex: Path, codex_version: str, tmp_path: Path
) -> None:
    """A codex thread resumed without ``thread/started``, or Gemini CLI, which never tells
    its hooks, say no version: the runner reads the one installed beside the program (the
    real npm installs here), never by running it, and the record carries it; what the
    session says wins."""
    assert runner.installed_version("wrap", runner_command=[str(codex), "app-server"]) == (
        codex_version
    )
    assert runner.installed_version("codex", runner_command=[str(codex)]) == codex_version
    gemini = require_gemini()
    assert runner.installed_version("gemini", runner_command=[str(gemini)]) == GEMINI_VERSION
    script = tmp_path / "codex"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert runner.installed_version("wrap", runner_command=[str(script)]) is None
    assert runner.installed_version("wrap", runner_command=[sys.executable, "x.py"]) is None

    settings = BrokerSettings(url="http://127.0.0.1:9", token="t", client="gemini", version="1.2.3")
    link = BrokerLink(settings)
    facts = AgentFacts(cwd=str(tmp_path))
    working = Transition(ActivityState.IDLE, ActivityState.WORKING, "BeforeAgent", facts=facts)
    said = AgentFacts("1.3.0", str(tmp_path))
    told = Transition(ActivityState.WORKING, ActivityState.BLOCKED, "x", facts=said)

    async def observed() -> list[Any]:
        async with httpx.AsyncClient() as client:
            link.reporter = ActivityReporter(client=client, session="s")
            seen = []
            for transition in (working, told):
                link.observe(transition)
                seen.append(link.reporter.policy.agent["version"])
            return seen

    assert anyio.run(observed) == ["1.2.3", "1.3.0"]
