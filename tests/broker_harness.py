"""A real broker on loopback for tests: uvicorn in a thread, on a free port.

Other test modules (the reporter's, the demo's) can use it too::

    with running_broker(team=make_team("alice", "bob")) as broker:
        httpx.get(broker.url + "/roster", headers=broker.auth("alice"))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from codex_presence._wire import ADMIN_PERMISSION, OPERATOR_PERMISSION
from codex_presence.broker.app import create_app
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.server import BrokerServer, listen_socket
from codex_presence.broker.state import Broker
from codex_presence.broker.team import Member, Role, Team, hash_token
from codex_presence.broker.web import WebRoster


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
class RunningBroker:
    url: str
    broker: Broker
    server: uvicorn.Server
    tokens: dict[str, str] = field(default_factory=dict)

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token_of(name)}"}


@contextmanager
def running_broker(
    *,
    team: Team,
    port: int = 0,
    limits: BrokerLimits | None = None,
    web: WebRoster | None = None,
    **broker_kwargs: Any,
) -> Iterator[RunningBroker]:
    """``port`` 0 picks a free one; a fixed port lets a test stop and restart "the" broker.
    ``limits`` bound the requests (short deadlines for the timing tests); ``web`` adds the
    web roster (its routes and its cookie sign-in); ``broker_kwargs`` configure the
    :class:`Broker` (clocks, TTL, keep-alive, authenticators)."""
    if web is not None:
        authenticators = [*broker_kwargs.pop("authenticators", ()), web.authenticate]
        broker_kwargs["authenticators"] = authenticators
    broker = Broker(team=team, **broker_kwargs)
    limits = limits if limits is not None else BrokerLimits()
    routes = web.routes(broker) if web is not None else ()
    app = create_app(broker, limits=limits, routes=routes)
    sock = listen_socket("127.0.0.1", port)  # with TCP_NODELAY on accepted connections
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", lifespan="on", timeout_graceful_shutdown=3
    )
    server = BrokerServer(config, broker=broker, limits=limits)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the broker did not start")
        time.sleep(0.005)
    try:
        yield RunningBroker(f"http://127.0.0.1:{port}", broker, server)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive(), "the broker did not stop"


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
