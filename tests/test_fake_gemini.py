"""The fake Gemini API speaks the stream format Gemini CLI reads, follows its script, and
answers the real gemini 0.61.0 (the last test: it fails, never skips, under CI=true when the
binary is missing)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bench._fake_gemini import (
    FakeGemini,
    Reply,
    function_responses,
    say,
    shell,
    text,
    user_texts,
)
from tests.support.gemini_driver import require_gemini, run_print
from tests.support.waiting import WAIT

TOOLS = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
STREAM = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"


def _post(api: FakeGemini, body: dict[str, Any], path: str = STREAM) -> httpx.Response:
    return httpx.post(f"{api.base_url}{path}", json=body, timeout=10)


def _chunks(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``data:`` payload of each server-sent event (Gemini's name no event)."""
    out = []
    for event in response.text.split("\r\n\r\n"):
        if event.strip():
            assert event.startswith("data: ") and "\n" not in event
            out.append(orjson.loads(event[len("data: ") :]))
    return out


def _parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]


def _said(chunks: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in _parts(chunks))


def _conversation(*texts: str, responses: tuple[str, ...] = ()) -> dict[str, Any]:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": t}]} for t in texts]
    for name in responses:
        part = {"functionResponse": {"name": name, "response": {"output": "hi"}}}
        contents.append({"role": "user", "parts": [part]})
    return {"contents": contents, "tools": TOOLS}


def test_a_text_and_function_call_reply_is_a_well_formed_stream() -> None:
    api = FakeGemini([Reply(parts=[text("Running it."), shell("echo hi")])])
    with api.serve():
        response = _post(api, _conversation("go"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    chunks = _chunks(response)
    assert len(chunks) == 2 and all(c["modelVersion"] == "gemini-x" for c in chunks)
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, "STOP"]
    assert "usageMetadata" in chunks[-1] and "usageMetadata" not in chunks[0]
    assert _said(chunks) == "Running it."
    calls = [p["functionCall"] for p in _parts(chunks) if "functionCall" in p]
    assert calls == [
        {
            "name": "run_shell_command",
            "args": {"command": "echo hi", "description": "run a command"},
        }
    ]


def test_replies_go_to_matching_requests_and_side_requests_do_not_eat_them() -> None:
    api = FakeGemini(
        [
            say("second", match=lambda b: "run_shell_command" in function_responses(b)),
            say("first"),
            say("a check", side=True),
        ]
    )
    with api.serve():
        side = _post(api, {"contents": []}, "/v1beta/models/flash:generateContent")
        json_side = _post(
            api,
            {"contents": [], "generationConfig": {"responseMimeType": "application/json"}},
            "/v1beta/models/flash:generateContent",
        )
        no_tools = _chunks(_post(api, {"contents": []}))
        first = _chunks(_post(api, _conversation("go")))
        second = _chunks(_post(api, _conversation("go", responses=("run_shell_command",))))
        count = _post(api, {}, "/v1beta/models/gemini-x:countTokens")
    assert side.json()["candidates"][0]["content"]["parts"] == [{"text": "a check"}]
    assert json_side.json()["candidates"][0]["content"]["parts"] == [{"text": "{}"}]
    assert (_said(no_tools), _said(first), _said(second)) == ("ok", "first", "second")
    assert count.json() == {"totalTokens": 10}
    assert api.unscripted == 1 and api.pending == 0
    assert len(api.wait_requests(3, WAIT)) == 3 and len(api.side_requests) == 2
    assert api.other == [("POST", "/v1beta/models/gemini-x:countTokens")]


def test_a_held_reply_waits_for_the_word() -> None:
    word = threading.Event()
    api = FakeGemini([say("released", hold=word)])
    got: list[httpx.Response] = []
    with api.serve():
        asking = threading.Thread(target=lambda: got.append(_post(api, _conversation("go"))))
        asking.start()
        api.wait_requests(1, WAIT)
        asking.join(0.3)
        assert got == []  # the request arrived and its answer waits
        word.set()
        asking.join(WAIT)
    assert _said(_chunks(got[0])) == "released"


def test_a_held_reply_gives_up_when_the_server_stops() -> None:
    api = FakeGemini([say("never", hold=threading.Event())])
    errors: list[BaseException] = []

    def ask() -> None:
        try:  # a long read timeout: only the server's end may end this request
            httpx.post(f"{api.base_url}{STREAM}", json=_conversation("go"), timeout=90)
        except httpx.HTTPError as exc:
            errors.append(exc)

    with api.serve():
        asking = threading.Thread(target=ask)
        asking.start()
        api.wait_requests(1, WAIT)
    asking.join(120)  # generous: a loaded machine
    assert not asking.is_alive() and len(errors) == 1, errors
    assert not isinstance(errors[0], httpx.TimeoutException), errors  # the server let go


def test_a_scripted_error_and_a_broken_stream() -> None:
    api = FakeGemini([Reply(status=429), Reply(parts=[text("cut short")], complete=False)])
    with api.serve():
        error = _post(api, _conversation())
        broken = _chunks(_post(api, _conversation()))
    assert error.status_code == 429
    assert error.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert _said(broken) == "cut short"
    assert all("finishReason" not in c["candidates"][0] for c in broken)


def test_other_routes_are_404_and_noted() -> None:
    api = FakeGemini()
    with api.serve():
        assert httpx.get(f"{api.base_url}/v1beta/models", timeout=5).status_code == 404
        assert _post(api, {}, "/v1/other").status_code == 404
    assert api.other == [("GET", "/v1beta/models"), ("POST", "/v1/other")]
    assert api.requests == []


def test_user_texts_and_function_responses() -> None:
    body = _conversation("first", "second", responses=("run_shell_command",))
    body["contents"].insert(1, {"role": "model", "parts": [{"text": "not the user's"}]})
    assert user_texts(body) == ["first", "second"]
    assert function_responses(body) == {"run_shell_command": {"output": "hi"}}


@pytest.mark.gemini
def test_real_gemini_in_print_mode_gets_the_scripted_answer(tmp_path: Path) -> None:
    binary = require_gemini()
    api = FakeGemini([say("the scripted answer", match=lambda b: "say hi" in user_texts(b))])
    with api.serve():
        run = run_print(tmp_path / "r", "say hi", base_url=api.base_url, gemini=binary)
    assert (run.returncode, run.stdout.strip()) == (0, "the scripted answer"), run.stderr
    assert api.pending == 0 and api.unscripted == 0
    events = [m["hook_event_name"] for m in run.capture.hooks()]
    assert events[0] == "SessionStart" and events[-1] == "SessionEnd", events
    assert "BeforeAgent" in events and "AfterAgent" in events
