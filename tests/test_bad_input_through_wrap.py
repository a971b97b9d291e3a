"""Bad input, generated, through the real ``wrap`` command (a subprocess per example):
hypothesis-made JSON-RPC-like lines, hostile bytes among them, go both ways — the child
replays a generated server stream, then echoes the client's bytes — and the client receives
exactly those bytes, the session ends with the child's status, and the derived state, pushed
to blocked by a dangling approval at the end, is idle again at EOF.

The mapping alone, fed well-formed turns duplicated, reordered and replayed late, is
tests/unit/test_bad_input.py's.
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

from tests.support.depth import examples

PY = sys.executable

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
    max_examples=examples(0.25),
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
