"""Bad input, generated: through the real ``wrap`` command, and into the mapping where
test_codex_mapping.py's property test does not reach.

Through wrap (a subprocess per example): hypothesis-made JSON-RPC-like lines, hostile
bytes among them, go both ways — the child replays a generated server stream, then echoes
the client's bytes — and the client receives exactly those bytes, the session ends with
the child's status, and the derived state, pushed to blocked by a dangling approval at the
end, is idle again at EOF.

Into the mapping: test_codex_mapping.py already feeds random message soups (junk fields,
ids up to 2**70). Here the messages are a *well-formed* turn whose events are duplicated,
reordered and replayed late, and requests whose ids are huge; the properties are stronger
than "survives": duplicates change nothing, a late replay of an ended turn never pins the
state, and an answered request unblocks whatever its id looks like.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codex_presence import CodexMapping

PY = sys.executable

# -- through wrap ---------------------------------------------------------------------------

ids = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**64, max_value=2**80).map(str),  # huge, as a string id
    st.text(max_size=8),
    st.none(),
    st.booleans(),
)
methods = st.sampled_from(
    [
        "turn/started",
        "turn/completed",
        "item/started",
        "item/completed",
        "thread/status/changed",
        "serverRequest/resolved",
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/tool/requestUserInput",
        "item/agentMessage/delta",
        "initialize",
        "no/such/method",
        "",
    ]
)
junk: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
params = st.fixed_dictionaries(
    {},
    optional={
        "threadId": st.one_of(st.sampled_from(["th", "th2"]), junk),
        "turnId": st.one_of(st.sampled_from(["t1", "t2"]), junk),
        "turn": st.one_of(st.fixed_dictionaries({"id": st.sampled_from(["t1", "t2"])}), junk),
        "item": st.one_of(
            st.fixed_dictionaries(
                {
                    "id": st.sampled_from(["i1", "i2"]),
                    "type": st.sampled_from(["commandExecution", "fileChange", "reasoning"]),
                }
            ),
            junk,
        ),
        "status": st.one_of(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["idle", "active"]),
                    "activeFlags": st.lists(st.just("waitingOnApproval"), max_size=1),
                }
            ),
            junk,
        ),
        "requestId": ids,
    },
)
message = st.one_of(
    st.fixed_dictionaries(
        {"method": methods, "params": st.one_of(params, junk)}, optional={"id": ids}
    ),
    st.fixed_dictionaries({"id": ids}, optional={"result": junk, "error": junk}),
    junk,
)


def _line(value: Any) -> bytes:
    return orjson.dumps(value) + b"\n"


hostile = st.one_of(
    st.binary(max_size=300),  # anything, newlines or not
    st.just(b"\xff\xfe\x80\xc3\x28 not utf-8\n"),
    st.just(b'{"method":"turn/started","params":{"threadId":"th","turn":{"id":"t1"}}'),  # cut
    st.just(b'{"method":"turn/started"\x00,"params":{}}\n'),
    st.just(b"\r\n\r\n\n"),
    st.just(b'{"id":18446744073709551617,"result":{}}\n'),  # past 64 bits
    st.just(b"[" * 3000 + b"]" * 3000 + b"\n"),  # deeper than any parser's limit
)
stream = st.lists(st.one_of(message.map(_line), hostile), max_size=30)

DANGLING = _line(
    {
        "method": "item/commandExecution/requestApproval",
        "id": 9_000_001,
        "params": {"threadId": "zz", "turnId": "zz", "itemId": "zz"},
    }
)
_CHILD = 'cat "$0" && exec cat'  # replay the server stream, then echo the client


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(server=stream, client=stream)
def test_generated_traffic_both_ways_through_wrap(
    tmp_path_factory: Any, server: list[bytes], client: list[bytes]
) -> None:
    script = tmp_path_factory.mktemp("bad") / "server.out"
    # A newline first, so that a previous unterminated line cannot swallow the approval.
    server_bytes = b"".join(server) + b"\n" + DANGLING
    script.write_bytes(server_bytes)
    client_bytes = b"".join(client)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    proc = subprocess.run(
        [PY, "-m", "codex_presence", "wrap", "--", "sh", "-c", _CHILD, str(script)],
        input=client_bytes,
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == server_bytes + client_bytes
    states = re.findall(rb"codex-presence: (idle|working|blocked) \(([^)]*)\)", proc.stderr)
    assert (b"blocked", b"item/commandExecution/requestApproval") in states, proc.stderr
    assert states[-1] == (b"idle", b"eof"), proc.stderr
    assert b"Traceback" not in proc.stderr


# -- into the mapping: a well-formed turn, abused --------------------------------------------


def note(method: str, **p: Any) -> dict[str, Any]:
    return {"method": method, "params": p}


def well_formed_turn(thread: str, turn: str, rid: Any) -> list[tuple[str, dict[str, Any]]]:
    """One turn with a command that needs approval, as codex 0.169.0 sends it."""
    ids = {"threadId": thread, "turnId": turn}
    cmd = {"type": "commandExecution", "id": f"{turn}-cmd"}
    return [
        (
            "server",
            note(
                "thread/status/changed",
                threadId=thread,
                status={"type": "active", "activeFlags": []},
            ),
        ),
        ("server", note("turn/started", threadId=thread, turn={"id": turn})),
        ("server", note("item/started", item=cmd, **ids)),
        (
            "server",
            {
                "method": "item/commandExecution/requestApproval",
                "id": rid,
                "params": {**ids, "itemId": cmd["id"]},
            },
        ),
        ("client", {"id": rid, "result": {"decision": "accept"}}),
        ("server", note("serverRequest/resolved", threadId=thread, requestId=rid)),
        ("server", note("item/completed", item=cmd, **ids)),
        ("server", note("thread/status/changed", threadId=thread, status={"type": "idle"})),
        (
            "server",
            note("turn/completed", threadId=thread, turn={"id": turn, "status": "completed"}),
        ),
    ]


def run(events: list[tuple[str, dict[str, Any]]]) -> tuple[CodexMapping, list[str]]:
    """Feed ``events`` as lines, checking at each step what any order must respect:
    transitions chain (each starts where the last ended), the member is blocked only once
    a request or waiting flag was seen and working only once a turn or tool started, and
    the end of stream reports idle exactly when the member was not idle."""
    mapping = CodexMapping()
    seen = []
    state = "idle"
    asked = started = False
    for direction, msg in events:
        method = msg.get("method", "")
        asked = asked or method.endswith("requestApproval") or "waitingOnApproval" in str(msg)
        started = started or method in ("turn/started", "item/started")
        line = orjson.dumps(msg) + b"\n"
        transition = mapping.feed_line(direction, line)  # type: ignore[arg-type]
        if transition is not None:  # a change of state, or of the background count alone
            assert transition.previous.value == state
            assert transition.changes_state or transition.changes_background
            assert transition.background == mapping.background
            state = transition.state.value
        assert mapping.state == state  # every change was reported
        assert state != "blocked" or asked
        assert state != "working" or started
        seen.append(state)
    return mapping, seen


def close(mapping: CodexMapping) -> None:
    before, background = mapping.state, mapping.background
    transition = mapping.close()
    if before == "idle" and not background:
        assert transition is None
    else:
        assert transition is not None
        assert (transition.previous.value, transition.state.value) == (before, "idle")
        assert (transition.previous_background, transition.background) == (background, 0)
        assert transition.cause == "eof"
    assert mapping.state == "idle" and not mapping.has_pending and not mapping.background


huge_ids = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(min_size=1, max_size=20),
    st.text(alphabet="0123456789", min_size=30, max_size=30),
    st.binary(min_size=1, max_size=4096).map(lambda b: b.hex()),  # up to 8 KiB of id
)


@settings(max_examples=200, deadline=None)
@given(huge_ids)
def test_a_request_with_any_id_blocks_until_that_id_is_answered(rid: Any) -> None:
    _, seen = run(well_formed_turn("th", "t1", rid))
    assert seen[3] == "blocked"
    assert seen[4] == "working"
    assert seen[-1] == "idle"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3), min_size=9, max_size=9), huge_ids)
def test_duplicated_events_change_nothing(copies: list[int], rid: Any) -> None:
    """Every event repeated 1-3 times in place: the state after each event is the same
    as with each event once (a repeated request is one request; a repeated answer
    answers nothing more)."""
    events = well_formed_turn("th", "t1", rid)
    _, once = run(events)
    repeated: list[tuple[str, dict[str, Any]]] = []
    positions = []
    for event, n in zip(events, copies, strict=True):
        repeated += [event] * n
        positions.append(len(repeated) - 1)
    _, seen = run(repeated)
    assert [seen[p] for p in positions] == once


@settings(max_examples=300, deadline=None)
@given(st.permutations(range(9)), st.booleans())
def test_any_order_of_a_turns_events_ends_idle_at_eof(order: list[int], twice: bool) -> None:
    events = well_formed_turn("th", "t1", 7)
    shuffled = [events[i] for i in order] * (2 if twice else 1)
    mapping, _ = run(shuffled)
    close(mapping)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=8), max_size=20))
def test_late_replays_of_an_ended_turn_never_pin_the_state(late: list[int]) -> None:
    """After the turn ended (turn/completed) and the thread went idle, any of its events
    arriving again — items, approvals already answered, even turn/started — must not
    leave the member working or blocked once the thread is idle again."""
    events = well_formed_turn("th", "t1", 7)
    replay = [events[i] for i in late if events[i][0] == "server"]
    mapping, _ = run([*events, *replay, events[-2]])  # the thread says idle again
    assert mapping.state == "idle", replay


@settings(max_examples=100, deadline=None)
@given(st.permutations(range(18)))
def test_two_interleaved_turns_in_any_order_end_idle(order: list[int]) -> None:
    a = well_formed_turn("th", "t1", 1)
    b = well_formed_turn("th2", "t2", "1")  # the same id, as a string: another request
    both = a + b
    mapping, _ = run([both[i] for i in order])
    close(mapping)


def test_one_mapping_ends_idle_after_a_thousand_generated_turns() -> None:
    """Bounded memory for ended turns and pending requests: many unanswered requests and
    many ended turns later, the mapping still tracks (and forgets) correctly."""
    mapping = CodexMapping()
    for n in range(1000):
        for direction, msg in well_formed_turn("th", f"t{n}", n)[:4]:  # never answered
            mapping.feed_line(direction, orjson.dumps(msg))  # type: ignore[arg-type]
        assert mapping.state == "blocked"
        mapping.feed_line(
            "server",
            orjson.dumps(note("turn/completed", threadId="th", turn={"id": f"t{n}"})),
        )
        mapping.feed_line(
            "server",
            orjson.dumps(note("thread/status/changed", threadId="th", status={"type": "idle"})),
        )
        assert mapping.state == "idle", n
    assert not mapping.has_pending
