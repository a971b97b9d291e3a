"""``codex-presence mcp``: the roster MCP tool, over stdio, against a real broker (issue 7).

The server runs as a real subprocess. First the ``mcp`` SDK's own client drives it; then the
real codex binary runs it from its config.toml and the fake model calls ``roster``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from bench._fake_model import Event, FakeModel, function_call, message, running, tool_names
from codex_presence import __version__
from codex_presence.broker.team import Member, Role, Team, hash_token
from tests.support.broker_harness import (
    RunningBroker,
    make_team,
    not_a_broker,
    running_broker,
    token_of,
)
from tests.support.codex_driver import Config, session
from tests.support.waiting import WAIT

TEAM = make_team("alice", "builder", "scout")

# The design's example, byte for byte: alice holds two streams, builder one, scout none.
EXPECTED = """\
team acme roster:
- alice (you) [director] [admin] connected=2
- builder [engineer] connected=1
- scout [scout] [operator] offline"""


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(team=TEAM, keepalive=30) as b:
        yield b


def token_file(tmp_path: Path, name: str, token: str | None = None) -> Path:
    path = tmp_path / f"{name}.token"
    path.write_text((token or token_of(name)) + "\n")
    path.chmod(0o600)
    return path


def mcp_command(broker_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "codex_presence", "mcp", "--broker", broker_url, *args]


@asynccontextmanager
async def subscribers(broker: RunningBroker, *names: str) -> AsyncIterator[None]:
    """Real SSE subscribers, one per name, held open (each waits for its first event)."""
    async with AsyncExitStack() as stack:
        streams = []  # kept alive: a collected event iterator would close its stream
        for name in names:
            client = await stack.enter_async_context(
                httpx.AsyncClient(base_url=broker.url, headers=broker.auth(name), timeout=10)
            )
            sse = await stack.enter_async_context(
                aconnect_sse(client, "GET", "/subscribe", params={"name": name})
            )
            assert sse.response.status_code == 200
            events = sse.aiter_sse()
            streams.append(events)
            while (await anext(events)).event != "roster":  # a bare "retry:" comes first
                pass
        yield


@asynccontextmanager
async def mcp_client(command: list[str]) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, read_timeout_seconds=20) as client:
        yield client


def text_of(result: Any) -> str:
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    assert len(texts) == 1, result
    return str(texts[0])


@pytest.mark.anyio
async def test_roster_tool_answers_the_exact_roster_text(
    broker: RunningBroker, tmp_path: Path
) -> None:
    command = mcp_command(
        broker.url, "--name", "alice", "--token-file", str(token_file(tmp_path, "alice"))
    )
    async with subscribers(broker, "alice", "alice", "builder"), mcp_client(command) as client:
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == (
            "codex-presence",
            __version__,
        )
        tools = await client.list_tools()
        (tool,) = tools.tools
        assert tool.name == "roster"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        result = await client.call_tool("roster", {})
        assert not result.is_error
        assert text_of(result) == EXPECTED


@pytest.mark.anyio
async def test_include_activity_adds_state_and_duration(tmp_path: Path) -> None:
    """Without the argument the text is the design's; ``include_activity`` adds each
    working or blocked member's state and how long it has held (the broker's clock is
    set 3 min 5 s back, so its reports are that old)."""
    with running_broker(team=TEAM, keepalive=30, wall_clock=lambda: time.time() - 185) as b:
        async with httpx.AsyncClient(base_url=b.url) as http:
            for name, state in (("builder", "working"), ("scout", "blocked")):
                response = await http.post(
                    "/presence/activity", json={"state": state}, headers=b.auth(name)
                )
                assert response.status_code == 204
        command = mcp_command(b.url, "--token-file", str(token_file(tmp_path, "alice")))
        async with subscribers(b, "builder"), mcp_client(command) as client:
            (tool,) = (await client.list_tools()).tools
            argument = tool.input_schema["properties"]["include_activity"]
            assert (argument["type"], argument["default"]) == ("boolean", False)
            plain = text_of(await client.call_tool("roster", {}))
            with_activity = text_of(await client.call_tool("roster", {"include_activity": True}))
            off = text_of(await client.call_tool("roster", {"include_activity": False}))
    assert (
        plain
        == off
        == (
            "team acme roster:\n"
            "- alice (you) [director] [admin] offline\n"
            "- builder [engineer] connected=1\n"
            "- scout [scout] [operator] offline"
        )
    )
    assert with_activity == (
        "team acme roster:\n"
        "- alice (you) [director] [admin] offline\n"
        "- builder [engineer] connected=1 working 3m\n"
        "- scout [scout] [operator] offline blocked 3m"
    )


@pytest.mark.anyio
async def test_the_roster_tool_escapes_control_characters(tmp_path: Path) -> None:
    """A broker whose team holds escape sequences and line breaks (the team file refuses
    them; this team is built in memory) still gets one line per member, escaped."""
    members = (
        Member(
            "alice", Role("x]\n- mallory [admin] connected=9", ()), hash_token(token_of("alice"))
        ),
        Member("bob", Role("\x1b]52;c;ZXZpbA==\x07", ()), hash_token(token_of("bob"))),
    )
    with running_broker(team=Team(name="acme\x1b[2J", members=members)) as evil:
        command = mcp_command(evil.url, "--token-file", str(token_file(tmp_path, "alice")))
        async with mcp_client(command) as client:
            text = text_of(await client.call_tool("roster", {}))
    assert text.splitlines() == [
        "team acme\\x1b[2J roster:",
        "- alice (you) [x]\\x0a- mallory [admin] connected=9] offline",
        "- bob [\\x1b]52;c;ZXZpbA==\\x07] offline",
    ]


@pytest.mark.anyio
async def test_roster_follows_the_broker_between_calls(
    broker: RunningBroker, tmp_path: Path
) -> None:
    command = mcp_command(broker.url, "--token-file", str(token_file(tmp_path, "scout")))
    async with mcp_client(command) as client:
        first = text_of(await client.call_tool("roster", {}))
        assert first.splitlines() == [
            "team acme roster:",
            "- alice [director] [admin] offline",
            "- builder [engineer] offline",
            "- scout (you) [scout] [operator] offline",
        ]
        async with subscribers(broker, "builder"):
            second = text_of(await client.call_tool("roster", {}))
        assert second.splitlines()[2] == "- builder [engineer] connected=1"


@pytest.mark.anyio
async def test_a_wrong_token_is_an_error_result_not_a_crash(
    broker: RunningBroker, tmp_path: Path
) -> None:
    path = token_file(tmp_path, "mallory", "cp_not-a-member-token")
    async with mcp_client(mcp_command(broker.url, "--token-file", str(path))) as client:
        result = await client.call_tool("roster", {})
        assert result.is_error
        assert "refused the token (401)" in text_of(result)
        assert "cp_not-a-member-token" not in text_of(result)
        # The server is still there for the next call.
        assert (await client.list_tools()).tools[0].name == "roster"


@pytest.mark.anyio
async def test_a_token_that_is_not_the_named_members_is_refused(
    broker: RunningBroker, tmp_path: Path
) -> None:
    command = mcp_command(
        broker.url, "--name", "alice", "--token-file", str(token_file(tmp_path, "builder"))
    )
    async with mcp_client(command) as client:
        result = await client.call_tool("roster", {})
        assert result.is_error
        assert text_of(result).endswith("the configured token is builder's, not alice's")


@pytest.mark.anyio
async def test_an_unreachable_broker_is_an_error_result(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    command = mcp_command(url, "--token-file", str(token_file(tmp_path, "alice")))
    async with mcp_client(command) as client:
        result = await client.call_tool("roster", {})
        assert result.is_error
        assert f"cannot reach the presence broker at {url}" in text_of(result)


@pytest.mark.anyio
async def test_a_url_that_is_not_a_broker_is_an_error_result(tmp_path: Path) -> None:
    with not_a_broker() as url:
        command = mcp_command(url, "--token-file", str(token_file(tmp_path, "alice")))
        async with mcp_client(command) as client:
            result = await client.call_tool("roster", {})
            assert result.is_error
            assert f"GET /whoami: {url} is not a codex-presence broker" in text_of(result)


def test_no_token_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "codex_presence", "mcp", "--broker", "http://127.0.0.1:9"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=WAIT,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""  # stdout belongs to the protocol
    assert b"no token" in proc.stderr


# -- the real codex ------------------------------------------------------------------------


def call_roster(body: dict[str, Any]) -> list[Event]:
    """Call the presence server's roster tool under whatever name codex offers it."""
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and "presence" in str(tool.get("name")):
            for sub in tool.get("tools") or []:
                if "roster" in str(sub.get("name")):
                    return [
                        function_call(
                            sub["name"], {}, call_id="call_roster", namespace=tool["name"]
                        )
                    ]
        if "presence" in str(tool.get("name")) and "roster" in str(tool.get("name")):
            return [function_call(tool["name"], {}, call_id="call_roster")]
    raise AssertionError(f"no roster tool offered: {tool_names(body)}")


@pytest.mark.codex
def test_codex_calls_the_roster_tool(broker: RunningBroker, codex: Path, tmp_path: Path) -> None:
    binary = codex  # once per codex version with fixtures
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    command = mcp_command(
        broker.url, "--name", "alice", "--token-file", str(token_file(tokens, "alice"))
    )
    config = Config(
        mcp_servers={
            "presence": {"command": command[0], "args": command[1:], "startup_timeout_sec": 30}
        }
    )
    model = FakeModel([running(call_roster), message("Roster read.")])
    with (
        model.serve(),
        session(
            tmp_path / "codex",
            base_url=model.base_url,
            config=config,
            recording=tmp_path / "session.jsonl",
            codex=binary,
        ) as s,
    ):
        s.initialize()
        thread = s.start_thread()
        s.wait_method("mcpServer/startupStatus/updated", 60, name="presence", status="ready")
        s.start_turn(thread, "who is on the team?")
        answered = 0
        while True:  # codex may ask to approve the tool call; accept it
            msg = s.wait_for(
                lambda m: (
                    (m.get("method") == "mcpServer/elicitation/request" and "id" in m)
                    or m.get("method") == "turn/completed"
                ),
                60,
                what="an elicitation or turn/completed",
            )
            if msg.get("method") == "turn/completed":
                break
            answered += 1
            assert answered <= 3, "too many elicitations"
            s.answer(msg, {"action": "accept", "content": None, "_meta": None})
        s.drain()
        items = [
            m["params"]["item"]
            for m in s.history
            if m.get("method") == "item/completed"
            and m["params"]["item"].get("type") == "mcpToolCall"
        ]
    # The driver leaves codex's stdout pipe to the garbage collector (a ResourceWarning,
    # an error under filterwarnings=error); the session is over, so close it here.
    assert s.proc.stdout is not None
    s.proc.stdout.close()
    assert model.pending == 0 and model.unscripted == 0
    (item,) = items
    assert item["server"] == "presence"
    assert item["tool"] == "roster"
    assert item["status"] == "completed", item
    texts = [c.get("text") for c in item["result"]["content"] if c.get("type") == "text"]
    lines = "\n".join(t for t in texts if t).splitlines()
    # Nobody holds a stream in this test: everyone is offline, alice is "you".
    assert lines == [
        "team acme roster:",
        "- alice (you) [director] [admin] offline",
        "- builder [engineer] offline",
        "- scout [scout] [operator] offline",
    ]


@pytest.mark.anyio
async def test_include_activity_counts_a_members_busy_sessions(tmp_path: Path) -> None:
    """Issue 23: a member with two busy sessions has both counted at the end of their line
    (with the activity opt-in only); one busy session says nothing more."""
    with running_broker(team=TEAM, keepalive=30, wall_clock=lambda: time.time() - 65) as b:
        async with httpx.AsyncClient(base_url=b.url) as http:
            for name, state, session in (
                ("builder", "working", "first-session"),
                ("builder", "blocked", "second-session"),
                ("scout", "working", "only-session"),
            ):
                body = {"state": state, "session": session}
                response = await http.post("/presence/activity", json=body, headers=b.auth(name))
                assert response.status_code == 204
        command = mcp_command(b.url, "--token-file", str(token_file(tmp_path, "alice")))
        async with mcp_client(command) as client:
            (tool,) = (await client.list_tools()).tools
            assert "(sessions: 2 working, 1 blocked)" in (tool.description or "")
            plain = text_of(await client.call_tool("roster", {}))
            with_activity = text_of(await client.call_tool("roster", {"include_activity": True}))
    assert "sessions" not in plain
    assert with_activity.splitlines()[1:] == [
        "- alice (you) [director] [admin] offline",
        "- builder [engineer] offline blocked 1m (sessions: 1 working, 1 blocked)",
        "- scout [scout] [operator] offline working 1m",
    ]


@pytest.mark.anyio
async def test_a_password_in_the_broker_url_never_reaches_the_model(tmp_path: Path) -> None:
    """The tool's result goes to the model: a password in ``--broker``'s URL was in it."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://me:s3cret-pass@127.0.0.1:{port}"
    command = mcp_command(url, "--token-file", str(token_file(tmp_path, "alice")))
    async with mcp_client(command) as client:
        result = await client.call_tool("roster", {})
        assert result.is_error
        said = text_of(result)
        assert f"cannot reach the presence broker at http://me:***@127.0.0.1:{port}" in said
        assert "s3cret-pass" not in said
