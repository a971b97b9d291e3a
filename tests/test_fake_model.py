"""The fake model server speaks what the scenarios script, over real HTTP on loopback."""

from __future__ import annotations

import httpx
import orjson

from bench._fake_model import (
    FakeModel,
    Step,
    broken,
    exec_command,
    fail_500,
    function_outputs,
    message,
    reply,
    tool_names,
    user_texts,
)


def events(body: bytes) -> list[dict[str, object]]:
    return [
        orjson.loads(line[len(b"data: ") :])
        for line in body.splitlines()
        if line.startswith(b"data: ")
    ]


def post(client: httpx.Client, model: FakeModel, payload: dict[str, object]) -> httpx.Response:
    return client.post(f"{model.base_url}/responses", json=payload)


def test_models_and_scripted_answers_in_order() -> None:
    model = FakeModel([message("hi there", deltas=2), fail_500()])
    with model.serve(), httpx.Client(timeout=10) as client:
        assert client.get(f"{model.base_url}/models").json() == {"models": []}
        first = post(client, model, {"input": []})
        assert first.headers["content-type"] == "text/event-stream"
        kinds = [e["type"] for e in events(first.content)]
        assert kinds == [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed",
        ]
        assert post(client, model, {"input": []}).status_code == 500
        assert model.pending == 0 and model.unscripted == 0
        post(client, model, {"input": []})
        assert model.unscripted == 1
    assert len(model.requests) == 3


def test_broken_stream_ends_before_completion() -> None:
    model = FakeModel([broken("partial")])
    with model.serve(), httpx.Client(timeout=10) as client:
        kinds = [e["type"] for e in events(post(client, model, {}).content)]
    assert kinds[0] == "response.created"
    assert "response.completed" not in kinds


def test_match_and_build_read_the_request_body() -> None:
    model = FakeModel(
        [
            Step(match="beta", build=lambda body: [exec_command("echo", call_id="c1")]),
            reply(exec_command("true", call_id="c2"), match=lambda body: "x" in str(body)),
        ]
    )
    beta: dict[str, object] = {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "beta"}]}]
    }
    with model.serve(), httpx.Client(timeout=10) as client:
        got = events(post(client, model, beta).content)
        assert model.pending == 1
    call = got[1]["item"]
    assert isinstance(call, dict) and call["call_id"] == "c1"
    assert orjson.loads(call["arguments"])["cmd"] == "echo"
    assert user_texts(model.requests[0]) == ["beta"]


def test_request_helpers() -> None:
    body = {
        "tools": [
            {"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "mcp__elicit", "tools": [{"name": "confirm"}]},
        ],
        "input": [{"type": "function_call_output", "call_id": "a", "output": "ok"}],
    }
    assert tool_names(body) == ["exec_command", "mcp__elicit.confirm"]
    assert function_outputs(body) == {"a": "ok"}
