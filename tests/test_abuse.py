"""Abuse of the broker, against the real ``codex-presence broker`` command (so the server
configuration under attack is the shipped one), beyond what tests/test_broker.py covers
(401 for missing and wrong tokens, a body or query naming someone else, subscribing as
someone else, malformed and nested bodies, 415, 413 by Content-Length and while reading a
chunked body, 429 past the stream cap).

The command runs with its state in memory, then in a real redis-server (``--redis``).
Every abuse gets a precise 4xx or a bounded cost (in time: the request-head and body
deadlines; in memory: the broker's RSS, read from /proc), and while it goes on a normal
member's requests keep succeeding.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.logs import RepeatLimit
from codex_presence.broker.team import hash_token
from codex_presence.broker.team_file import render_team
from tests.support.broker_harness import (
    BrokerProcess,
    FakeClock,
    broker_process,
    make_team,
    running_broker,
    token_of,
)
from tests.support.redis_server import redis_server
from tests.support.waiting import WAIT, eventually

NAMES = ("alice", "bob", "carol")
LIMITS = BrokerLimits()
"""The shipped broker's limits: what the real command runs with."""
QUICK = BrokerLimits(head_timeout=1.0, body_timeout=1.0)
"""Short deadlines for the timing test, on a broker in this process."""
MAX_HEAD, MAX_SUBSCRIBERS = LIMITS.max_head, LIMITS.max_subscribers


class Target(Protocol):
    """A broker to attack: the real command's (:class:`BrokerProcess`) or a quick one."""

    @property
    def url(self) -> str: ...

    @property
    def port(self) -> int: ...


@dataclass
class QuickBroker:
    url: str
    port: int


@pytest.fixture(scope="module", params=["memory", "redis"])
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """The real command, with its state in memory, then in a real redis-server: abuse is
    refused the same way by both (issue 18)."""
    team = tmp_path_factory.mktemp("abuse") / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in NAMES]))
    with ExitStack() as stack:
        redis = stack.enter_context(redis_server()).url if request.param == "redis" else None
        yield stack.enter_context(broker_process("--team", str(team), redis=redis))


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token_of(name)}"}


def served(broker: Target) -> None:
    """A normal member is served: a report and a roster read, each within 5 s."""
    with httpx.Client(base_url=broker.url, timeout=5) as client:
        response = client.post("/presence/activity", json={"state": "working"}, headers=auth("bob"))
        assert response.status_code == 204
        roster = client.get("/roster", headers=auth("bob"))
        assert roster.status_code == 200
        (bob,) = [p for p in roster.json() if p["name"] == "bob"]
        assert bob["activity"] == "working"
        response = client.post("/presence/activity", json={"state": "idle"}, headers=auth("bob"))
        assert response.status_code == 204


def member(broker: Target, name: str) -> dict[str, object]:
    roster = httpx.get(broker.url + "/roster", headers=auth("carol"), timeout=5).json()
    (me,) = [p for p in roster if p["name"] == name]
    return me  # type: ignore[no-any-return]


def connect(broker: Target) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_status(sock: socket.socket) -> int:
    """The status of the next response on ``sock`` (reads its head only)."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return int(data.split(b" ", 2)[1])


def raw(broker: BrokerProcess, request: bytes) -> int:
    with connect(broker) as sock:
        sock.sendall(request)
        return read_status(sock)


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        f"Basic {token_of('alice')}",  # another scheme
        f"Bearer {hash_token(token_of('alice')).hex()}",  # the team file's hash is no token
        f"Bearer {token_of('alice').upper()}",
        f"Bearer {token_of('alice')[:-1]}",
        "Bearer " + "x" * 8000,
        f"Bearer  {token_of('alice')} extra",
    ],
)
def test_tokens_that_are_not_a_members(broker: BrokerProcess, authorization: str) -> None:
    response = httpx.post(
        broker.url + "/presence/activity",
        json={"state": "working"},
        headers={"authorization": authorization},
        timeout=5,
    )
    assert response.status_code == 401
    assert "activity" not in member(broker, "alice")


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer cp_test-token-of-alice\x00",
        b"Bearer cp_test-token-of-\xc3\xa9alice",
        b"Bearer \xff\xfe",
    ],
)
def test_binary_garbage_in_the_header_is_a_4xx(broker: BrokerProcess, value: bytes) -> None:
    body = b'{"state":"working"}'
    request = (
        b"POST /presence/activity HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: "
        + value
        + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        + body
    )
    assert raw(broker, request) in (400, 401)
    assert "activity" not in member(broker, "alice")
    served(broker)


def test_an_authorization_header_of_a_megabyte_is_431_and_costs_nothing(
    broker: BrokerProcess,
) -> None:
    before = broker.rss_kb()
    with connect(broker) as sock:
        sock.sendall(b"GET /roster HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ")
        with suppress(OSError):  # the broker may close on us before we are done
            for _ in range(64):
                sock.sendall(b"a" * 16384)
        assert read_status(sock) == 431
    assert broker.rss_kb() - before < 8 * 1024
    served(broker)


def test_endless_headers_are_431_and_memory_stays_flat(broker: BrokerProcess) -> None:
    """Before the guard, 40 MB of headers grew the broker by 40 MB."""
    before = broker.rss_kb()
    sent = 0
    with connect(broker) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        with suppress(OSError):
            for k in range(400):
                sock.sendall(b"x-%d: %s\r\n" % (k, b"a" * 100_000))
                sent += 100_000
        assert read_status(sock) == 431
    # Refused long before the 40 MB were sent: what got out is the cap plus socket buffers.
    assert sent < MAX_HEAD + 8 * 1024 * 1024
    assert broker.rss_kb() - before < 8 * 1024
    served(broker)


def test_a_pipelining_client_that_never_reads_costs_bounded_memory(broker: BrokerProcess) -> None:
    """One connection writes ``GET /healthz`` heads, 500 at a time, and never reads an
    answer. Before the guard parsed a slice at a time, every head was queued as a request
    (~2 KB each): 10 MB of heads grew the broker by over 500 MB. Now the broker stops
    reading while answers wait, so what the client can send is what the sockets buffer,
    and memory stays flat; others are served meanwhile."""
    before = broker.rss_kb()
    burst = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 500
    sent = 0
    with connect(broker) as sock:
        sock.settimeout(0.2)
        refused_since = time.monotonic()
        # Until 10 MB went out, or the broker took nothing for 2 s (bounded either way).
        while sent < 10 * 1024 * 1024 and time.monotonic() - refused_since < 2:
            try:
                sent += sock.send(burst)
                refused_since = time.monotonic()
            except TimeoutError:
                pass
            except OSError:
                break  # closed on us: also bounded
        served(broker)
        assert broker.rss_kb() - before < 50 * 1024, f"{sent} bytes of heads were taken in"
    served(broker)


def test_many_pipelining_clients_that_never_read_cost_bounded_memory(
    broker: BrokerProcess,
) -> None:
    """600 connections each write 60 KB of ``GET /healthz`` heads at once and never read.
    Before, each held its 60 KB and up to a slice's worth of parsed heads (~95 KB a
    connection: 4,000 of them took the broker from 34 to 350 MB, never given back). Now
    at most one head waits parsed, and all the connections together hold at most
    ``max_held`` bytes: past it, a connection that would hold more is closed."""
    burst = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    burst *= 60_000 // len(burst)
    before = broker.rss_kb()
    with ExitStack() as stack:
        for _ in range(600):
            sock = stack.enter_context(connect(broker))
            with suppress(OSError):  # closed by the broker already: bounded too
                sock.sendall(burst)
        served(broker)
        grown = broker.rss_kb() - before
        assert grown < LIMITS.max_held // 1024 + 12 * 1024, f"{grown} KB"
    served(broker)


def test_a_pipelining_client_gets_every_answer_in_order(broker: BrokerProcess) -> None:
    """Pipelining itself still works: 300 requests in one write, then every answer, in
    the order asked."""
    paths = ["/healthz", "/roster", "/whoami"] * 100
    request = b"".join(
        b"GET %s HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer %s\r\n\r\n"
        % (path.encode(), token_of("alice").encode())
        for path in paths
    )
    with connect(broker) as sock, sock.makefile("rb") as answers:
        sock.sendall(request)
        for path in paths:
            status = answers.readline()
            assert status.startswith(b"HTTP/1.1 200 "), (path, status)
            length = 0
            while (line := answers.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            body = answers.read(length)
            expected = {"/healthz": b'"status"', "/roster": b'"lastSeen"', "/whoami": b'"team"'}
            assert expected[path] in body, (path, body)


def test_past_max_connections_a_new_connection_gets_503(tmp_path: Path) -> None:
    """With ``CODEX_PRESENCE_MAX_CONNECTIONS=20``, 20 idle connections fill the broker: the
    next one is answered 503 with a reason and closed, at once; once they go, a member is
    served again."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in NAMES]))
    env = {"CODEX_PRESENCE_MAX_CONNECTIONS": "20"}
    with broker_process("--team", str(team), env=env) as capped, ExitStack() as idle:
        for _ in range(20):
            idle.enter_context(connect(capped))
        with connect(capped) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"retry-after: " in answer
        assert b"the broker has 20 connections open" in answer
        idle.close()
        eventually(lambda: _served_now(capped), WAIT, "served after the idle connections left")
        capped.stderr.until("refusing connections: 20 are open", 60)


def _served_now(broker: Target) -> bool:
    try:
        served(broker)
    except (httpx.HTTPError, AssertionError):
        return False
    return True


@pytest.mark.parametrize("quiet", [False, True], ids=["default", "quiet"])
def test_malformed_requests_do_not_flood_the_log(tmp_path: Path, quiet: bool) -> None:
    """200 malformed requests, each answered 400. By default the log says so 5 times, the
    5th saying that the rest are counted; with ``-q`` not at all: a client's bad request is
    not a warning about the broker. (Before, each one was a line, ``-q`` or not.)"""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in NAMES]))
    with broker_process("--team", str(team), *(["-q"] if quiet else [])) as noisy:
        for _ in range(200):
            with connect(noisy) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                assert read_status(sock) == 400
        served(noisy)
        noisy.proc.terminate()
        said = noisy.stderr.rest().splitlines()
    about_them = [line for line in said if "Invalid HTTP request" in line]
    if quiet:
        assert about_them == []
    else:
        assert len(about_them) == 5, said
        assert "more like this in the next 60 s are counted, not logged" in about_them[-1]


def test_repeated_log_lines_are_counted_and_the_count_is_logged() -> None:
    clock = FakeClock()
    limit = RepeatLimit(burst=2, window=60, clock=clock)
    logger = logging.getLogger("tests.repeat_limit")
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    handler.addFilter(limit)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        for k in range(10):
            logger.warning("bad request from %s", k)
        logger.warning("something else")
        logger.debug("bad request from %s", "debug")  # what -v asks for always passes
        clock.advance(61)
        logger.warning("bad request from %s", "later")
    finally:
        logger.removeHandler(handler)
    assert lines == [
        "bad request from 0",
        "bad request from 1 (more like this in the next 60 s are counted, not logged)",
        "something else",
        "bad request from debug",
        "bad request from later (8 more like this in the last 60 s not logged)",
    ]


# -- speaking or listening as someone else ----------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "name=alice&name=bob",
        "name=bob&name=alice",
        "name=ALICE",
        "name=alice%00",
        "name=alice%20",
        "name=%61lice&name=bob",
    ],
)
def test_subscribing_under_a_confusable_name(broker: BrokerProcess, query: str) -> None:
    """Alice's token never opens a stream counted for bob, whatever the query holds."""
    with (
        httpx.Client(base_url=broker.url, timeout=5) as client,
        client.stream("GET", "/subscribe?" + query, headers=auth("alice")) as response,
    ):
        if response.status_code == 200:
            assert member(broker, "alice")["connected"] == 1
        else:
            assert response.status_code == 403
        assert member(broker, "bob")["connected"] == 0


@pytest.mark.parametrize("alice_first", [True, False])
def test_two_authorization_headers_never_mix_members(
    broker: BrokerProcess, alice_first: bool
) -> None:
    """Two Authorization headers are ambiguous: neither counts, in either order."""
    body = b'{"state":"blocked"}'
    headers = [
        b"authorization: Bearer %s\r\n" % token_of("alice").encode(),
        b"authorization: Bearer cp_not-a-token\r\n",
    ]
    request = (
        b"POST /presence/activity HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        + b"".join(headers if alice_first else headers[::-1])
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )
    assert raw(broker, request) == 401
    for name in ("alice", "bob", "carol"):
        assert "activity" not in member(broker, name), name


# -- bodies -----------------------------------------------------------------------------------


def test_a_50_mb_streamed_body_is_413_and_never_buffered(broker: BrokerProcess) -> None:
    before = broker.rss_kb()
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(50):
            sent += 1 << 20
            yield b" " * (1 << 20)

    try:
        response = httpx.post(
            broker.url + "/presence/activity",
            content=body(),
            headers={**auth("alice"), "content-type": "application/json"},
            timeout=10,
        )
    except httpx.HTTPError:
        pass  # the broker answered and closed while we were still sending: also fine
    else:
        assert response.status_code == 413
    assert broker.rss_kb() - before < 8 * 1024
    assert "activity" not in member(broker, "alice")
    served(broker)


def test_a_deeply_nested_body_is_bounded_by_the_size_cap(broker: BrokerProcess) -> None:
    for depth in (400, 100_000):
        response = httpx.post(
            broker.url + "/presence/activity",
            content=b'{"state":' + b"[" * depth + b"]" * depth + b"}",
            headers={**auth("alice"), "content-type": "application/json"},
            timeout=10,
        )
        assert response.status_code == (400 if depth * 2 + 10 <= 1024 else 413)
    served(broker)


# -- many connections, slow connections --------------------------------------------------------


def test_thousands_of_streams_from_one_member(broker: BrokerProcess) -> None:
    """2000 subscriptions as alice: the first MAX_SUBSCRIBERS stream, every other one is
    a 429 at once; everyone else is served meanwhile; all of it ends when alice goes."""
    before = broker.rss_kb()
    request = (
        b"GET /subscribe?name=alice HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer %s\r\n\r\n"
        % token_of("alice").encode()
    )
    statuses: dict[int, int] = {}
    with ExitStack() as stack:
        for k in range(2000):
            sock = stack.enter_context(connect(broker))
            sock.sendall(request)
            status = read_status(sock)
            statuses[status] = statuses.get(status, 0) + 1
            if status != 200:
                stack.pop_all().close()  # refused: let it go; the streams stay open
                stack = ExitStack()
            if k % 500 == 0:
                served(broker)
            if k == MAX_SUBSCRIBERS - 1:
                keep = stack  # the open streams
                stack = ExitStack()
        assert statuses == {200: MAX_SUBSCRIBERS, 429: 2000 - MAX_SUBSCRIBERS}
        assert member(broker, "alice")["connected"] == MAX_SUBSCRIBERS
        served(broker)
        assert broker.rss_kb() - before < 32 * 1024
        keep.close()
    eventually(lambda: member(broker, "alice")["connected"] == 0, WAIT, "streams uncounted")


@pytest.fixture
def quick_broker() -> Iterator[QuickBroker]:
    """A broker in this process whose head and body deadlines are a second."""
    with running_broker(team=make_team(*NAMES), limits=QUICK) as running:
        yield QuickBroker(running.url, int(running.url.rsplit(":", 1)[1]))


def test_slowloris_and_never_ending_bodies_cost_a_bounded_time(quick_broker: QuickBroker) -> None:
    """300 sockets trickle a request head one byte at a time, 50 send nothing, 50 send a
    head and then a body that never ends. Each is answered 408 and closed within its
    deadline (plus slack), and a normal member is served all along. (The deadlines are
    :data:`QUICK`'s, so that this takes seconds; the shipped ones are ten times longer.)"""
    broker = quick_broker
    head = b"GET /roster HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer " + b"a" * 200
    post = (
        b"POST /presence/activity HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer %s\r\n"
        b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"state"'
        % token_of("carol").encode()
    )
    trickle = [connect(broker) for _ in range(300)]
    silent = [connect(broker) for _ in range(50)]
    bodies = [connect(broker) for _ in range(50)]
    for sock in bodies:
        sock.sendall(post)
    stop = threading.Event()
    sent = [0] * len(trickle)

    def drip() -> None:
        for step in range(len(head)):  # bounded: at most len(head) rounds
            for k, sock in enumerate(trickle):
                if sent[k] == step:
                    try:
                        sock.send(head[step : step + 1])
                        sent[k] += 1
                    except OSError:
                        pass  # refused and closed: this one is done
            if stop.wait(0.25):
                return

    dripper = threading.Thread(target=drip, daemon=True)
    started = time.monotonic()
    dripper.start()
    try:
        while time.monotonic() - started < QUICK.head_timeout + 1:
            served(broker)
            time.sleep(0.5)
        for sock in [*trickle, *silent, *bodies]:
            sock.settimeout(
                max(
                    0.1,
                    started + max(QUICK.head_timeout, QUICK.body_timeout) + 5 - time.monotonic(),
                )
            )
            assert read_status(sock) == 408
            assert _until_eof(sock)
        assert max(sent) < len(head)  # cut off before any head was complete
        assert member(broker, "carol").get("activity") is None
    finally:
        stop.set()
        dripper.join(WAIT)
        for sock in [*trickle, *silent, *bodies]:
            sock.close()
    served(broker)


def _until_eof(sock: socket.socket) -> bool:
    for _ in range(1000):
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
    return False
