"""The scripted codex sessions recorded as fixtures.

Each scenario is a model script (what the fake model answers, in order) plus a client
script (what the driver does: start threads and turns, answer or ignore approvals,
interrupt, kill). :func:`record` runs one against the real binary and writes its recording.
Scenarios wait on messages, never on fixed sleeps; the only timing is in the commands codex
runs (``sleep``) and in deliberately slow model steps.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench._fake_model import (
    Event,
    FakeModel,
    Step,
    broken,
    exec_command,
    fail_500,
    function_call,
    function_outputs,
    message,
    message_events,
    reply,
    running,
    tool_names,
    user_texts,
)
from tests.support.codex_driver import CodexSession, Config, session

__all__ = ["SCENARIOS", "Scenario", "record"]

HERE = Path(__file__).resolve().parent

APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")


@dataclass
class Scenario:
    name: str
    about: str
    drive: Callable[[CodexSession, FakeModel], None]
    steps: Callable[[], list[Step]]
    config: Config = field(default_factory=Config)


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    about: str, steps: Callable[[], list[Step]], config: Config | None = None
) -> Callable[[Callable[[CodexSession, FakeModel], None]], Callable[..., None]]:
    def register(fn: Callable[[CodexSession, FakeModel], None]) -> Callable[..., None]:
        SCENARIOS[fn.__name__] = Scenario(fn.__name__, about, fn, steps, config or Config())
        return fn

    return register


def _server_request(method: str) -> Callable[[dict[str, Any]], bool]:
    return lambda msg: msg.get("method") == method and "id" in msg


def _one_turn(s: CodexSession, text: str, **params: Any) -> tuple[str, dict[str, Any]]:
    s.initialize()
    thread = s.start_thread()
    s.start_turn(thread, text, **params)
    started = s.wait_method("turn/started", threadId=thread)
    return thread, started


def _finish(s: CodexSession, thread: str) -> None:
    s.turn_completed(thread)
    s.drain()


# -- plain turns ---------------------------------------------------------------------------


@scenario(
    "One turn: the model streams a short answer, no tools.",
    lambda: [message("Hello world", deltas=2)],
)
def plain_chat(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "hi")
    _finish(s, thread)


@scenario(
    "One turn that runs a quick shell command (no approval) and then answers.",
    lambda: [reply(exec_command("echo hello", call_id="call_echo")), message("It said hello.")],
)
def command(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "run echo")
    _finish(s, thread)


@scenario(
    "A three-second command with output deltas; the client steers the busy turn meanwhile.",
    lambda: [
        reply(
            exec_command("for i in 1 2 3; do echo tick $i; sleep 1; done", call_id="call_ticks"),
            delay=0.1,
        ),
        message("Counted to three, and noted the steer.", delay=0.1),
    ],
)
def long_command(s: CodexSession, m: FakeModel) -> None:
    thread, started = _one_turn(s, "count slowly")
    s.wait_item("started", "commandExecution")
    s.wait_method("item/commandExecution/outputDelta")
    steer = s.start_turn(thread, "also mention the steer")
    result = s.response(steer)
    assert result["turn"]["id"] == started["params"]["turn"]["id"], "steer started a new turn"
    _finish(s, thread)


@scenario(
    "Two turns in a row on one thread, each a short answer.",
    lambda: [message("First answer."), message("Second answer.")],
)
def two_turns(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "first question")
    s.turn_completed(thread)
    s.start_turn(thread, "second question")
    s.wait_method("turn/started", threadId=thread)
    _finish(s, thread)


_alpha_held = threading.Event()
"""Alpha's answer waits for it: beta's whole turn runs inside alpha's (by order; 1.5 s of
delay, before, could run out first on a loaded machine)."""


@scenario(
    "Two threads whose turns overlap: alpha's model answer is slow, beta's is quick.",
    lambda: [
        message("Alpha done.", hold=_alpha_held, match="alpha-task"),
        message("Beta done.", match="beta-task"),
    ],
)
def two_threads(s: CodexSession, m: FakeModel) -> None:
    _alpha_held.clear()
    s.initialize()
    alpha = s.start_thread()
    beta = s.start_thread()
    s.start_turn(alpha, "alpha-task")
    s.wait_method("turn/started", threadId=alpha)
    s.start_turn(beta, "beta-task")
    s.turn_completed(beta)
    _alpha_held.set()
    s.turn_completed(alpha)
    s.drain()


@scenario(
    "The model asks for two commands in one response (parallel tool calls).",
    lambda: [
        reply(
            exec_command("echo alpha", call_id="call_a"),
            exec_command("echo beta", call_id="call_b"),
        ),
        message("Both ran."),
    ],
)
def parallel_tools(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "run two things")
    _finish(s, thread)


# -- approvals -----------------------------------------------------------------------------


def _approval_steps() -> list[Step]:
    return [
        reply(exec_command("touch made.txt && echo done", call_id="call_touch", escalate=True)),
        message("Finished."),
    ]


def _approve(decision: str) -> Callable[[CodexSession, FakeModel], None]:
    def drive(s: CodexSession, m: FakeModel) -> None:
        thread, _ = _one_turn(s, "make a file")
        request = s.wait_for(_server_request("item/commandExecution/requestApproval"))
        s.answer(request, {"decision": decision})
        _finish(s, thread)

    return drive


SCENARIOS["approval_accepted"] = Scenario(
    "approval_accepted",
    "A command that needs approval; the client accepts, it runs, the model answers.",
    _approve("accept"),
    _approval_steps,
    APPROVALS,
)
SCENARIOS["approval_declined"] = Scenario(
    "approval_declined",
    "A command that needs approval; the client declines, the model answers anyway.",
    _approve("decline"),
    _approval_steps,
    APPROVALS,
)
SCENARIOS["approval_cancelled"] = Scenario(
    "approval_cancelled",
    "A command that needs approval; the client cancels, which interrupts the turn.",
    _approve("cancel"),
    lambda: _approval_steps()[:1],
    APPROVALS,
)


@scenario(
    "An approval left unanswered; the client interrupts the turn instead.",
    lambda: _approval_steps()[:1],
    APPROVALS,
)
def approval_interrupted(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "make a file")
    request = s.wait_for(_server_request("item/commandExecution/requestApproval"))
    s.interrupt(thread, request["params"]["turnId"])
    s.turn_completed(thread)
    s.wait_method("serverRequest/resolved", requestId=request["id"])
    s.drain()


PATCH = (
    "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\nEOF\n"
)


@scenario(
    "A file edit (apply_patch) under a read-only sandbox; the client accepts the change.",
    lambda: [reply(exec_command(PATCH, call_id="call_patch")), message("File added.")],
    APPROVALS,
)
def file_change_approval(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "add hello.txt")
    request = s.wait_for(_server_request("item/fileChange/requestApproval"))
    s.answer(request, {"decision": "accept"})
    _finish(s, thread)


QUESTIONS = {
    "questions": [
        {
            "id": "confirm_path",
            "header": "Confirm",
            "question": "Proceed with the plan?",
            "options": [
                {"label": "Yes (Recommended)", "description": "Continue."},
                {"label": "No", "description": "Stop."},
            ],
        }
    ]
}


@scenario(
    "Plan mode: the model asks the user a question (request_user_input); the client answers.",
    lambda: [
        reply(function_call("request_user_input", QUESTIONS, call_id="call_ask")),
        message("Proceeding with the plan."),
    ],
)
def user_input(s: CodexSession, m: FakeModel) -> None:
    mode = {"mode": "plan", "settings": {"model": "mock-model", "developer_instructions": None}}
    thread, _ = _one_turn(s, "plan something", collaborationMode=mode)
    request = s.wait_for(_server_request("item/tool/requestUserInput"))
    s.answer(request, {"answers": {"confirm_path": {"answers": ["Yes (Recommended)"]}}})
    _finish(s, thread)


def _call_mcp_tool(body: dict[str, Any]) -> list[Event]:
    """Call the elicit server's tool under whatever name codex offers it."""
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and "elicit" in str(tool.get("name")):
            for sub in tool.get("tools") or []:
                if "confirm_action" in str(sub.get("name")):
                    return [
                        function_call(
                            sub["name"],
                            {"action": "deploy"},
                            call_id="call_mcp",
                            namespace=tool["name"],
                        )
                    ]
        if "confirm_action" in str(tool.get("name")):
            return [function_call(tool["name"], {"action": "deploy"}, call_id="call_mcp")]
    raise AssertionError(f"no elicit tool offered: {tool_names(body)}")


ELICIT = Config(
    approval_policy="on-request",  # under "never" codex declines elicitations by itself
    mcp_servers={
        "elicit": {
            "command": sys.executable,
            "args": [str(HERE / "elicit_mcp_server.py")],
            "startup_timeout_sec": 30,
        }
    },
)


@scenario(
    "An MCP tool asks for an elicitation (a form); the client accepts it.",
    lambda: [running(_call_mcp_tool), message("Deployed.")],
    ELICIT,
)
def mcp_elicitation(s: CodexSession, m: FakeModel) -> None:
    s.initialize()
    thread = s.start_thread()
    s.wait_method("mcpServer/startupStatus/updated", 60, name="elicit", status="ready")
    s.start_turn(thread, "deploy it")
    answered = 0
    while True:  # codex may ask to approve the tool call itself before the tool's form
        msg = s.wait_for(
            lambda m: (
                _server_request("mcpServer/elicitation/request")(m)
                or (m.get("method") == "turn/completed")
            ),
            30,
        )
        if msg.get("method") == "turn/completed":
            break
        answered += 1
        assert answered <= 3, "too many elicitations"
        content = {"confirmed": True} if msg["params"].get("mode") == "form" else None
        s.answer(msg, {"action": "accept", "content": content, "_meta": None})
    assert answered, "no elicitation was asked"
    s.drain()


# -- interrupts, failures, process death -------------------------------------------------


@scenario(
    "The client interrupts a turn while its command runs; the session ends right after.",
    lambda: [reply(exec_command("sleep 3", call_id="call_sleep"))],
)
def interrupt_command(s: CodexSession, m: FakeModel) -> None:
    thread, started = _one_turn(s, "sleep a bit")
    s.wait_item("started", "commandExecution")
    s.interrupt(thread, started["params"]["turn"]["id"])
    s.turn_completed(thread)


@scenario(
    "Interrupted while `sleep 2; echo late` runs: the command's events arrive after the turn.",
    lambda: [reply(exec_command("sleep 2; echo late", call_id="call_late"))],
)
def outlives_turn(s: CodexSession, m: FakeModel) -> None:
    thread, started = _one_turn(s, "sleep then echo")
    s.wait_item("started", "commandExecution")
    s.interrupt(thread, started["params"]["turn"]["id"])
    s.turn_completed(thread)
    s.wait_item("completed", "commandExecution", 15)
    s.drain()


@scenario(
    "The model answers HTTP 500 and retries are off: the turn fails.",
    lambda: [fail_500()],
)
def failed_turn(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "this will fail")
    _finish(s, thread)


@scenario(
    "The model's stream breaks before response.completed; codex retries and the turn succeeds.",
    lambda: [broken("Partial answer"), message("Full answer.")],
    Config(stream_max_retries=1),
)
def broken_stream(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "answer despite a broken stream")
    _finish(s, thread)


@scenario(
    "The app-server is SIGKILLed while a command runs; the recording just ends.",
    lambda: [reply(exec_command("sleep 5", call_id="call_doomed"))],
)
def killed(s: CodexSession, m: FakeModel) -> None:
    _one_turn(s, "run something long")
    s.wait_item("started", "commandExecution")
    s.kill()
    s.drain()


# -- subagent ------------------------------------------------------------------------------


def _is_child(body: dict[str, Any]) -> bool:
    return any("child task" in text for text in user_texts(body))


def _has_output(call_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda body: call_id in function_outputs(body) and not _is_child(body)


def _wait_for_child(body: dict[str, Any]) -> list[Event]:
    output = function_outputs(body)["call_spawn"]
    try:
        parsed = orjson.loads(output)
    except orjson.JSONDecodeError as exc:
        raise AssertionError(f"spawn output is not JSON: {output!r}") from exc
    agent = parsed.get("agent_id") or parsed.get("id") or parsed.get("thread_id")
    if not agent:
        raise AssertionError(f"no agent id in spawn output: {output!r}")
    return [
        function_call(
            "wait_agent", {"targets": [agent]}, call_id="call_wait", namespace="multi_agent_v1"
        )
    ]


@scenario(
    "The model spawns a subagent and waits for it; the child thread runs its own turn.",
    lambda: [
        reply(
            function_call(
                "spawn_agent",
                {"message": "child task: say hi"},
                call_id="call_spawn",
                namespace="multi_agent_v1",
            ),
            match=lambda body: not _is_child(body) and not function_outputs(body),
        ),
        Step(events=message_events("child says hi", deltas=0), match=_is_child),
        running(_wait_for_child, match=_has_output("call_spawn")),
        message("The child said hi.", match=_has_output("call_wait")),
    ],
)
def subagent(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "ask a helper to say hi")
    s.wait_item("completed", "collabAgentToolCall", 30)
    _finish(s, thread)


# -- demo ----------------------------------------------------------------------------------


@scenario(
    "Human-paced session for `codex-presence demo`: a command waits for approval (answered "
    "after a pause), runs three seconds, the model answers; then a second short turn.",
    lambda: [
        Step(
            events=[
                *message_events("Let me check the build.", deltas=3),
                exec_command(
                    "for i in 1 2 3; do echo step $i; sleep 1; done",
                    call_id="call_build",
                    escalate=True,
                    justification="run the build steps",
                ),
            ],
            delay=0.3,
        ),
        message("The build passed all three steps.", deltas=4, delay=0.3),
        message("You're welcome!", deltas=2, delay=0.3, match="thanks"),
    ],
    APPROVALS,
)
def demo_session(s: CodexSession, m: FakeModel) -> None:
    thread, _ = _one_turn(s, "please run the build")
    request = s.wait_for(_server_request("item/commandExecution/requestApproval"))
    time.sleep(2.0)  # the human reads the request: the pause is what the demo shows
    s.answer(request, {"decision": "accept"})
    s.turn_completed(thread)
    time.sleep(1.5)  # idle between turns, for the demo
    s.start_turn(thread, "thanks")
    s.wait_method("turn/started", threadId=thread)
    _finish(s, thread)


# -- recording -----------------------------------------------------------------------------


def record(name: str, out: Path, *, root: Path, codex: Path | None = None) -> FakeModel:
    """Run scenario ``name`` against the real codex; write its recording to ``out``.

    ``root`` is the scratch directory (wiped first): ``root/home`` is CODEX_HOME and
    ``root/work`` the work dir. Raises if the model script was not used up exactly.
    """
    sc = SCENARIOS[name]
    model = FakeModel(sc.steps())
    with (
        model.serve(),
        session(root, base_url=model.base_url, config=sc.config, recording=out, codex=codex) as s,
    ):
        sc.drive(s, model)
    if model.unscripted or model.pending:
        raise AssertionError(
            f"{name}: {model.pending} scripted answers unused, "
            f"{model.unscripted} requests unscripted"
        )
    return model
