"""A real broker on loopback for tests: in this process (:func:`running_broker`, uvicorn
in a thread, with injectable clocks and limits) or as the real command
(:func:`broker_process`, ``codex-presence broker --port 0``, which says its address); or,
for a test of what the broker answers rather than of its connections, its app without a
socket (:func:`in_process_broker`)::

    with running_broker(team=make_team("alice", "bob")) as broker:
        httpx.get(broker.url + "/roster", headers=broker.auth("alice"))

Either keeps its state in memory, or in Redis with ``redis=URL`` (a
:func:`~tests.support.redis_server.redis_server`'s): :func:`shared_state` makes the Redis
store and session store that :func:`running_broker` and the web roster then share.

Ports are never guessed: a broker binds port 0 and says which it got, and a test that
needs a port before its broker exists holds it with :func:`reserved_port` (bound, so
nobody else can take it, and not listening, so connections are refused) and hands the
socket over.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.testclient import TestClient

from codex_presence._wire import ADMIN_PERMISSION, DEFAULT_TTL, OPERATOR_PERMISSION
from codex_presence.broker.config import BrokerConfig, build_broker
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.sign_ins import RedisSignIns
from codex_presence.broker.redis.store import RedisStore
from codex_presence.broker.redis.team import team_marks
from codex_presence.broker.server import BrokerServer, bound_socket, listen_socket
from codex_presence.broker.state import Broker
from codex_presence.broker.team import Member, Role, Team, hash_token
from codex_presence.broker.web import WebRoster
from tests.support.waiting import WAIT, Lines, eventually


class FakeClock:
    """A clock the test moves by hand (thread-safe enough: one float)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def token_of(name: str) -> str:
    return f"cp_test-token-of-{name}"


_ROLES = {
    "alice": Role("director", (ADMIN_PERMISSION, OPERATOR_PERMISSION)),
    "builder": Role("engineer", ()),
    "scout": Role("scout", (OPERATOR_PERMISSION,)),
}


def make_team(*names: str, team: str = "acme") -> Team:
    """A team whose member ``x`` has the token ``token_of(x)``; known names get roles."""
    members = tuple(Member(n, _ROLES.get(n), hash_token(token_of(n))) for n in names)
    return Team(name=team, members=members)


@dataclass
class SharedState:
    """A broker's state in Redis: the link, the presence store, the session store."""

    link: RedisLink
    store: RedisStore
    sign_ins: RedisSignIns


def shared_state(url: str, team: Team, **kwargs: Any) -> SharedState:
    """The Redis state of one broker of ``team`` at ``url``. ``kwargs``: the store's
    (``ttl``, ``clock``, ``beat``, ``bound``), and the sign-ins' ``sign_in_ttl`` and
    ``max_sign_ins``."""
    sign_in_kwargs = {
        key.removeprefix("sign_in_"): kwargs.pop(key)
        for key in ("sign_in_ttl", "max_sign_ins")
        if key in kwargs
    }
    link = RedisLink(url, team=team.name)
    kwargs.setdefault("marks", team_marks(team))
    store = RedisStore(link, names=[m.name for m in team.members], **kwargs)
    return SharedState(link, store, RedisSignIns(link, **sign_in_kwargs))


@dataclass
class RunningBroker:
    url: str
    broker: Broker
    server: uvicorn.Server
    tokens: dict[str, str] = field(default_factory=dict)

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token_of(name)}"}


@contextmanager
def reserved_port() -> Iterator[socket.socket]:
    """A loopback port that is ours until the socket is handed to a broker
    (``running_broker(sock=...)``) or the block ends; its number is
    ``sock.getsockname()[1]``."""
    sock = bound_socket("127.0.0.1", 0)
    try:
        yield sock
    finally:
        sock.close()


def _broker_app(
    team: Team,
    limits: BrokerLimits,
    web: WebRoster | None,
    redis: str | None,
    broker_kwargs: dict[str, Any],
    extra_routes: Callable[[Broker], Sequence[BaseRoute]] | None = None,
) -> tuple[Broker, Starlette]:
    """The :class:`Broker` and its ASGI app, as :func:`running_broker` describes them,
    built by the broker's one factory (:func:`~codex_presence.broker.config.build_broker`)."""
    settings = {
        key: broker_kwargs.pop(key)
        for key in ("activity_ttl", "keepalive", "session_grace", "fanout_interval")
        if key in broker_kwargs
    }
    store = broker_kwargs.pop("store", None)
    if redis is not None:
        store_kwargs: dict[str, Any] = {"ttl": settings.get("activity_ttl", DEFAULT_TTL)}
        if "clock" in broker_kwargs:
            store_kwargs["clock"] = broker_kwargs["clock"]
        store = shared_state(redis, team, **store_kwargs).store
    built = build_broker(
        team,
        BrokerConfig(limits=limits, **settings),
        store=store,
        web=web,
        notifier=broker_kwargs.pop("watcher", None),
        extra_routes=extra_routes,
        **broker_kwargs,
    )
    return built.broker, built.app


@contextmanager
def running_broker(
    *,
    team: Team,
    port: int = 0,
    sock: socket.socket | None = None,
    limits: BrokerLimits | None = None,
    web: WebRoster | None = None,
    redis: str | None = None,
    extra_routes: Callable[[Broker], Sequence[BaseRoute]] | None = None,
    **broker_kwargs: Any,
) -> Iterator[RunningBroker]:
    """``port`` 0 picks a free one; a fixed port lets a test stop and restart "the" broker;
    ``sock`` (from :func:`reserved_port`) is a port held until now. ``limits`` bound the
    requests (short deadlines for the timing tests); ``web`` adds the web roster (its
    routes and its cookie sign-in); ``redis`` (a URL, or None: in memory) is where the
    state lives; ``extra_routes`` makes more routes for the broker (``GET /notify``'s);
    ``broker_kwargs`` configure the :class:`Broker` (clocks, TTL, keep-alive,
    authenticators, or a ``store`` of the caller's)."""
    limits = limits if limits is not None else BrokerLimits()
    broker, app = _broker_app(team, limits, web, redis, broker_kwargs, extra_routes)
    if sock is None:
        sock = listen_socket("127.0.0.1", port)  # with TCP_NODELAY on accepted connections
    else:
        sock.listen(1024)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", lifespan="on", timeout_graceful_shutdown=3
    )
    server = BrokerServer(config, broker=broker, limits=limits)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: server.started or not thread.is_alive(), what="the broker's start")
    if not server.started:
        raise RuntimeError("the broker did not start")
    try:
        yield RunningBroker(f"http://127.0.0.1:{port}", broker, server)
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()
        assert not thread.is_alive(), "the broker did not stop"


@dataclass
class InProcessBroker:
    """The broker app without a socket: :attr:`client` hands each request to the app."""

    broker: Broker
    client: httpx.Client

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token_of(name)}"}


@contextmanager
def in_process_broker(
    *,
    team: Team,
    limits: BrokerLimits | None = None,
    web: WebRoster | None = None,
    redis: str | None = None,
    **broker_kwargs: Any,
) -> Iterator[InProcessBroker]:
    """The broker of :func:`running_broker` (the same arguments but the port) as an ASGI
    app in this process, its lifespan running, for a test of what the broker answers
    rather than of its connections: no uvicorn, so none of its start and stop (a fixed
    0.1 s pause, and a poll) per test. The client is Starlette's TestClient, an
    ``httpx.Client`` whose transport calls the app (httpx's own ASGITransport is async
    only); an exception in the app fails the test rather than becoming a 500. A stream
    (``/subscribe``) is read whole before it returns: streams, the request limits that
    uvicorn enforces (heads, deadlines) and anything about sockets need
    :func:`running_broker`."""
    limits = limits if limits is not None else BrokerLimits()
    broker, app = _broker_app(team, limits, web, redis, broker_kwargs)
    with TestClient(
        app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000), follow_redirects=False
    ) as client:
        yield InProcessBroker(broker, client)


@dataclass
class BrokerProcess:
    """The real ``codex-presence broker`` command, running."""

    proc: subprocess.Popen[str]
    url: str
    port: int
    stderr: Lines
    """What it says on stderr; ``stderr.seen`` holds the lines read so far."""

    def said(self) -> str:
        return "".join(self.stderr.seen)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@contextmanager
def broker_process(
    *args: str, port: int = 0, env: Mapping[str, str] | None = None, redis: str | None = None
) -> Iterator[BrokerProcess]:
    """``codex-presence broker --port PORT ARGS...`` in a clean environment (no
    ``CODEX_PRESENCE_*`` from the host, plus ``env``; ``redis``: its
    ``CODEX_PRESENCE_REDIS``), once it has said where it listens; killed at the end if it
    still runs."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    if redis is not None:
        clean["CODEX_PRESENCE_REDIS"] = redis
    with subprocess.Popen(
        [sys.executable, "-m", "codex_presence", "broker", "--port", str(port), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **(env or {})},
    ) as proc:
        try:
            assert proc.stderr is not None
            err = Lines(proc.stderr)
            match = re.search(r"listening on (http://\S+:(\d+))", err.until("listening on http"))
            assert match is not None
            yield BrokerProcess(proc, match.group(1), int(match.group(2)), err)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)


@contextmanager
def serving_html(html: str) -> Iterator[str]:
    """A web server on 127.0.0.1 that answers every GET and POST 200 with ``html``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = html.encode()

    class Page(BaseHTTPRequestHandler):
        def _page(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _page

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def not_a_broker() -> AbstractContextManager[str]:
    """A web server that answers every request 200 with an HTML page, as a proxy's
    sign-in page or a dev server's fallback route does."""
    return serving_html("<!doctype html><title>Sign in</title>")
