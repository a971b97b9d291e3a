"""The facts the Claude Code feeder will be built on, checked against the real binary.

Each test runs claude 2.1.332 against the fake Messages API, with every hook an HTTP hook
to a capture server, and checks what docs/claude-code-hooks.md says: which hooks fire in
which order, what the transcript and the session status file show, and when. Interactive
sessions run in tmux (``tests/support/claude_scenarios.py`` holds their scripts).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench._claude_driver import Capture, HookAnswer, run_print
from bench._fake_anthropic import FakeAnthropic, Reply, bash, say, tool_results
from tests.support.claude_scenarios import record

pytestmark = pytest.mark.claude

Message = dict[str, Any]


def _events(cap: Capture) -> list[str]:
    return [str(m.get("hook_event_name")) for m in cap.hooks()]


def _first(cap: Capture, pred: Any, after: float = 0.0) -> tuple[float, Message]:
    """The first entry after ``after`` for which ``pred(source, msg)`` holds."""
    for t, source, msg in cap.entries:
        if t > after and pred(source, msg):
            return t, msg
    raise AssertionError("no such entry")


def _key_time(cap: Capture, what: str) -> float:
    return next(t for t, action in cap.actions if action == what)


def _status(value: str) -> Any:
    return lambda source, msg: source == "session" and msg.get("status") == value


def _text(value: str) -> Any:
    def pred(source: str, msg: Message) -> bool:
        content = (msg.get("message") or {}).get("content")
        return (
            source == "transcript"
            and msg.get("type") == "user"
            and isinstance(content, list)
            and any(c.get("text") == value for c in content if isinstance(c, dict))
        )

    return pred


def _print_tool_run(root: Path, **kw: Any) -> Any:
    api = FakeAnthropic(
        [
            Reply(blocks=[bash("echo hi", id="toolu_t1")]),
            say("done", match=lambda b: "toolu_t1" in tool_results(b)),
        ]
    )
    with api.serve():
        return run_print(
            root,
            "run echo hi",
            base_url=api.base_url,
            args=("--allowedTools", "Bash(echo hi)"),
            **kw,
        )


def test_print_mode_hooks_bracket_the_turn_and_the_tool(claude: Path, tmp_path: Path) -> None:
    run = _print_tool_run(tmp_path / "r")
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "done", "")
    assert _events(run.capture) == [
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolBatch",
        "Stop",
        "SessionEnd",
    ]
    hooks = run.capture.hooks()
    assert {h["session_id"] for h in hooks} == {hooks[0]["session_id"]}
    assert {h["prompt_id"] for h in hooks} == {hooks[0]["prompt_id"]}
    assert [h.get("tool_use_id") for h in hooks[1:3]] == ["toolu_t1", "toolu_t1"]
    assert hooks[-1]["reason"] == "other"
    # The transcript is followed from the path the first hook names.
    kinds = [m.get("type") for m in run.capture.transcript()]
    assert "user" in kinds and "assistant" in kinds
    # claude -p keeps a session status file too.
    assert any(s == "session" and m.get("status") == "busy" for _, s, m in run.capture.entries)


def test_claude_waits_for_every_hook_answer(claude: Path, tmp_path: Path) -> None:
    """Claude sends no hook before the one before it was answered: each answer is held
    for a while, and no other hook arrives while one is held (decided by order; a claude
    that went on without its answer would send the next hook into the hold)."""
    lock = threading.Lock()
    order: list[str] = []

    def held(msg: Message) -> HookAnswer:
        event = str(msg.get("hook_event_name"))
        with lock:
            order.append(f"+{event}")
        time.sleep(0.5)
        with lock:
            order.append(f"-{event}")
        return HookAnswer()

    run = _print_tool_run(tmp_path / "r", answer=held)
    assert run.returncode == 0
    events = _events(run.capture)
    assert len(events) >= 5, events
    assert order == [f"{sign}{event}" for event in events for sign in "+-"], order


def test_a_hook_timeout_bounds_the_wait(claude: Path, tmp_path: Path) -> None:
    """A hook server that never answers (until the run is over) is waited for only as long
    as the hook's timeout: claude finishes, which it could not do if it waited on."""
    release = threading.Event()

    def never(msg: Message) -> HookAnswer:
        release.wait(120)
        return HookAnswer()

    try:
        run = _print_tool_run(tmp_path / "r", answer=never, hook={"timeout": 1})
    finally:
        release.set()
    assert run.returncode == 0 and run.stdout.strip() == "done"
    assert _events(run.capture)[0] == "UserPromptSubmit"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (HookAnswer(), None),
        (HookAnswer(body=b"{}"), None),
        (HookAnswer(status=500), "HTTP 500"),
        (HookAnswer(body=b"ok"), "must return JSON"),
    ],
    ids=["empty-200", "json-200", "500", "text-200"],
)
def test_only_a_2xx_with_an_empty_or_json_body_is_silent(
    claude: Path, tmp_path: Path, answer: HookAnswer, error: str | None
) -> None:
    run = _print_tool_run(tmp_path / "r", answer=answer)
    assert run.returncode == 0 and run.stdout.strip() == "done"
    if error is None:
        assert run.stderr == ""
    else:
        assert error in run.stderr


def test_hook_posts_take_the_environments_proxy_unless_no_proxy_names_loopback(
    claude: Path, tmp_path: Path
) -> None:
    dead_proxy = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    for no_proxy, hooks in (("api", 0), ("127.0.0.1", 3)):
        api = FakeAnthropic([say("done")])
        with api.serve():
            # Only the API's own host:port bypasses the proxy, or all of loopback.
            bypass = f"127.0.0.1:{api.port}" if no_proxy == "api" else "127.0.0.1,localhost"
            run = run_print(
                tmp_path / no_proxy,
                "hi",
                base_url=api.base_url,
                env={**dead_proxy, "NO_PROXY": bypass},
            )
        assert run.returncode == 0 and run.stdout.strip() == "done"
        assert len(run.capture.hooks()) == hooks
        if not hooks:
            assert "ECONNREFUSED 127.0.0.1:9" in run.stderr


def test_a_permission_dialog_answered_yes(claude: Path, tmp_path: Path) -> None:
    cap = record("permission_yes", None, root=tmp_path / "r")
    assert _events(cap) == [
        "UserPromptSubmit",
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "PostToolBatch",
        "Stop",
        "SessionEnd",
    ]
    request = cap.hooks("PermissionRequest")[0]
    assert request["tool_name"] == "Bash" and "tool_use_id" not in request
    t_request, _ = _first(cap, lambda s, m: m.get("hook_event_name") == "PermissionRequest")
    t_waiting, waiting = _first(cap, _status("waiting"))
    t_answered = next(t for t, a in cap.actions if a == "key Enter" and t > t_request)
    # The session file says so while the dialog waits: before it is answered.
    assert waiting["waitingFor"] == "permission prompt" and t_waiting < t_answered
    assert any(m.get("subtype") == "turn_duration" for m in cap.transcript())
    assert cap.hooks("SessionEnd")[0]["reason"] == "prompt_input_exit"


@pytest.mark.parametrize("name", ["permission_no", "esc_at_permission", "esc_during_tool"])
def test_an_interrupt_fires_no_hook_but_shows_in_the_transcript_and_the_session_file(
    claude: Path, tmp_path: Path, name: str
) -> None:
    cap = record(name, None, root=tmp_path / "r")
    key = next(t for t, a in cap.actions if a in ("key 4", "key Escape"))
    exit_typed = _key_time(cap, "type '/exit'")
    after = [m["hook_event_name"] for t, s, m in cap.entries if s == "hook" and t > key]
    assert after == ["SessionEnd"]  # that of /exit: nothing for the interrupt itself
    # Both files say it on their own, before anything else is done at the prompt.
    t_marker, _ = _first(cap, _text("[Request interrupted by user for tool use]"), key)
    t_idle, _ = _first(cap, _status("idle"), key)
    assert t_marker < exit_typed and t_idle < exit_typed


def test_esc_before_the_first_token_shows_only_in_the_session_file(
    claude: Path, tmp_path: Path
) -> None:
    cap = record("esc_during_stream", None, root=tmp_path / "r")
    key = _key_time(cap, "key Escape")
    exit_typed = _key_time(cap, "type '/exit'")
    between = [(s, m) for t, s, m in cap.entries if key < t < exit_typed]
    assert [s for s, _ in between] == ["session"]
    assert between[0][1]["status"] == "idle"


def test_a_prompt_sent_during_a_turn_fires_user_prompt_submit_with_the_open_prompt_id(
    claude: Path, tmp_path: Path
) -> None:
    cap = record("prompt_while_streaming", None, root=tmp_path / "r")
    submits = cap.hooks("UserPromptSubmit")
    stops = cap.hooks("Stop")
    assert [h["prompt"] for h in submits] == ["first task", "second task"]
    assert submits[0]["prompt_id"] == submits[1]["prompt_id"] == stops[0]["prompt_id"]
    # The queued prompt then runs as a turn of its own, with a prompt id no hook opened.
    assert len(stops) == 2 and stops[1]["prompt_id"] != submits[0]["prompt_id"]
