"""The fake Messages API speaks the stream format Claude Code reads, and follows its script."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from bench._fake_anthropic import (
    FakeAnthropic,
    Reply,
    bash,
    last_user_texts,
    say,
    text,
    tool_results,
    tool_use,
    user_texts,
)

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def _post(api: FakeAnthropic, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{api.base_url}/v1/messages?beta=true", json=body, timeout=10)


def _events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of each server-sent event, checking the two agree."""
    out = []
    for chunk in response.text.split("\n\n"):
        if not chunk.strip():
            continue
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        payload = orjson.loads(data[len("data: ") :])
        assert payload["type"] == name[len("event: ") :]
        out.append((payload["type"], payload))
    return out


def _conversation(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-x", "stream": True, "tools": TOOLS, "messages": list(messages)}


def test_a_text_and_tool_use_reply_is_a_well_formed_stream() -> None:
    api = FakeAnthropic([Reply(blocks=[text("Running it."), bash("echo hi", id="toolu_1")])])
    with api.serve():
        response = _post(api, _conversation({"role": "user", "content": "go"}))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    events = _events(response)
    kinds = [k for k, _ in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["model"] == "claude-x"
    # Each block: start, deltas, stop, with its index; deltas rebuild the content.
    blocks: dict[int, dict[str, Any]] = {}
    for kind, data in events:
        if kind == "content_block_start":
            blocks[data["index"]] = {"start": data["content_block"], "parts": [], "stopped": False}
        elif kind == "content_block_delta":
            delta = data["delta"]
            blocks[data["index"]]["parts"].append(delta.get("text", delta.get("partial_json")))
        elif kind == "content_block_stop":
            blocks[data["index"]]["stopped"] = True
    assert all(b["stopped"] for b in blocks.values())
    assert blocks[0]["start"] == {"type": "text", "text": ""}
    assert "".join(blocks[0]["parts"]) == "Running it."
    assert blocks[1]["start"] == {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    assert orjson.loads("".join(blocks[1]["parts"])) == {
        "command": "echo hi",
        "description": "run a command",
    }
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_text_reply_ends_the_turn() -> None:
    api = FakeAnthropic([say("done")])
    with api.serve():
        events = _events(_post(api, _conversation({"role": "user", "content": "go"})))
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_replies_go_to_matching_requests_and_side_requests_do_not_eat_them() -> None:
    api = FakeAnthropic(
        [
            say("second", match=lambda b: "toolu_9" in tool_results(b)),
            say("first"),
        ]
    )
    with api.serve():
        side = _events(_post(api, {"model": "m", "stream": True, "messages": []}))
        first = _events(_post(api, _conversation({"role": "user", "content": "go"})))
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}
        second = _events(_post(api, _conversation(result)))

    def said(events: list[tuple[str, dict[str, Any]]]) -> str:
        return "".join(d["delta"].get("text", "") for k, d in events if k == "content_block_delta")

    assert (said(side), said(first), said(second)) == ("ok", "first", "second")
    assert api.unscripted == 1 and api.pending == 0
    assert len(api.wait_requests(3, 1)) == 3


def test_a_scripted_error_and_a_broken_stream() -> None:
    api = FakeAnthropic([Reply(status=529), Reply(blocks=[text("cut")], complete=False)])
    with api.serve():
        error = _post(api, _conversation())
        broken = _events(_post(api, _conversation()))
    assert error.status_code == 529 and error.json()["type"] == "error"
    assert [k for k, _ in broken][-1] == "content_block_stop"


def test_other_paths_are_404_and_noted() -> None:
    api = FakeAnthropic()
    with api.serve():
        assert httpx.get(f"{api.base_url}/v1/models", timeout=5).status_code == 404
    assert api.other == [("GET", "/v1/models")] and api.requests == []


def test_user_texts_skip_system_messages_and_reminders() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "you are"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>\nnoise\n</system-reminder>"},
                    {"type": "text", "text": "first"},
                ],
            },
            {"role": "assistant", "content": [tool_use("Bash", {}, id="toolu_2").__dict__]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "out"},
                    {"type": "text", "text": "[Request interrupted by user for tool use]"},
                    {"type": "text", "text": "second"},
                ],
            },
        ]
    }
    assert user_texts(body) == ["first", "[Request interrupted by user for tool use]", "second"]
    assert last_user_texts(body) == ["[Request interrupted by user for tool use]", "second"]
    assert tool_results(body) == {"toolu_2": "out"}
