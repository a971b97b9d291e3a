"""The web roster (issue 7): the page in real headless Chromium against a real broker.

Chromium is Debian's (``/usr/bin/chromium``, or ``$CODEX_PRESENCE_TEST_CHROMIUM``), driven
by Python Playwright; it is never downloaded. Teammates are real: a ``roster --watch``
subprocess holds an SSE stream, and activity arrives as bearer-authenticated POSTs to
``/presence/activity``. Waiting is done with Playwright's ``expect`` and bounded polls of
``GET /roster``; nothing asserts how fast anything is.

The tests without the ``browser`` marker check the sign-in endpoints over plain HTTP. The
tests of the ``web`` fixture run twice: with the sessions in memory, and in a real
redis-server (issue 18).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.config import Target
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.broker.web import COOKIE_NAME, KEY_HEADER, SignedIn, WebRoster
from codex_presence.core.backoff import Backoff
from codex_presence.core.notify_policy import Rule
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    broker_process,
    make_team,
    running_broker,
    serving_html,
    shared_state,
    token_of,
)
from tests.support.receivers import Receiver, receiver
from tests.support.waiting import WAIT, eventually

TEAM = make_team("alice", "builder", "scout")
CHROMIUM = Path(os.environ.get("CODEX_PRESENCE_TEST_CHROMIUM") or "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HIDE_DELAY_MS = 1000
KEY_ITEM = "codexPresenceSessionKey"
"""Where the page keeps its session key (localStorage)."""
SCREENSHOTS = os.environ.get("CODEX_PRESENCE_SCREENSHOTS")
"""A directory: the tests that show the page working, blocked and stale write their
pictures there (``docs/``, for the README and docs/broker.md). Unset, nothing is written."""


def screenshot(page: Page, name: str, store_url: str | None = None) -> None:
    """With ``$CODEX_PRESENCE_SCREENSHOTS``, the page as it is now, into ``NAME.png``
    there (once: with the state in memory)."""
    if SCREENSHOTS and store_url is None:
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))


class ShiftedClock:
    """The wall clock, shifted by ``offset`` seconds (settable): a broker whose reports
    were made minutes ago, without waiting minutes."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.frozen: float | None = None
        """Set: the clock stands still there (the offset left out)."""

    def __call__(self) -> float:
        if self.frozen is not None:
            return self.frozen
        return time.time() + self.offset


@dataclass
class Web:
    """A broker with the web roster, plus the roster's session store."""

    broker: RunningBroker
    roster: WebRoster

    @property
    def url(self) -> str:
        return self.broker.url

    def report(
        self,
        name: str,
        state: str,
        session: str | None = None,
        background: int | None = None,
        agent: dict[str, Any] | None = None,
    ) -> None:
        body: dict[str, Any] = {"state": state}
        if session is not None:
            body["session"] = session
        if background is not None:
            body["background"] = background
        if agent is not None:
            body["agent"] = agent
        response = httpx.post(
            self.url + "/presence/activity",
            json=body,
            headers=self.broker.auth(name),
            timeout=5,
        )
        assert response.status_code == 204, response.text

    def roster_json(self) -> dict[str, dict[str, Any]]:
        response = httpx.get(self.url + "/roster", headers=self.broker.auth("scout"), timeout=5)
        assert response.status_code == 200
        return {p["name"]: p for p in response.json()}

    def wait_connected(self, name: str, count: int, timeout: float = WAIT) -> None:
        """Poll ``GET /roster`` until ``name`` has ``count`` subscribers (bounded)."""

        def holds() -> bool:
            return bool(self.roster_json()[name]["connected"] == count)

        eventually(holds, timeout, f"{name} connected={count}", interval=0.05)


def make_web(
    store_url: str | None = None,
    *,
    wall_clock: ShiftedClock | None = None,
    port: int = 0,
    **roster_kwargs: Any,
) -> Iterator[Web]:
    """A broker with the web roster; with ``store_url``, both keep their state in Redis;
    ``wall_clock`` dates the broker's reports; ``port`` 0 is any free one."""
    shared = shared_state(store_url, TEAM) if store_url is not None else None
    sign_ins = shared.sign_ins if shared is not None else None
    roster = WebRoster(team=TEAM, sign_ins=sign_ins, **roster_kwargs)
    store = shared.store if shared is not None else None
    clocks = {} if wall_clock is None else {"wall_clock": wall_clock}
    with running_broker(
        team=TEAM, port=port, keepalive=30, web=roster, store=store, **clocks
    ) as broker:
        yield Web(broker, roster)


@pytest.fixture
def wall() -> ShiftedClock:
    """The broker's wall clock: real time, unless a test sets it back."""
    return ShiftedClock()


@pytest.fixture
def web(store_url: str | None, wall: ShiftedClock) -> Iterator[Web]:
    yield from make_web(store_url, wall_clock=wall)


# -- the sign-in endpoints over plain HTTP -------------------------------------------------


def sign_in(web: Web, token: str, **headers: str) -> httpx.Response:
    return httpx.post(
        web.url + "/session",
        content=f"token={token}",
        headers={"content-type": "application/x-www-form-urlencoded", **headers},
        timeout=5,
    )


def session_of(response: httpx.Response) -> dict[str, str]:
    """The headers that carry the session a sign-in made: its cookie and its key."""
    assert response.status_code == 200, response.text
    key = response.json()["key"]
    return {"cookie": f"{COOKIE_NAME}={response.cookies[COOKIE_NAME]}", KEY_HEADER: key}


def test_sign_in_sets_a_session_cookie_not_the_token(web: Web) -> None:
    response = sign_in(web, token_of("alice"))
    assert response.status_code == 200
    assert response.json()["name"] == "alice"
    assert len(response.json()["key"]) >= 40
    (set_cookie,) = response.headers.get_list("set-cookie")
    attributes = [part.strip().lower() for part in set_cookie.split(";")]
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "path=/" in attributes
    assert "secure" not in attributes  # plain http on loopback: Secure would drop it
    session_id = response.cookies[COOKIE_NAME]
    assert token_of("alice") not in set_cookie + response.text
    assert len(session_id) >= 40
    cookie = session_of(response)
    who = httpx.get(web.url + "/whoami", headers=cookie, timeout=5)
    assert who.status_code == 200
    assert who.json()["name"] == "alice"
    # The cookie reads what a bearer token reads, the stream included...
    assert httpx.get(web.url + "/roster", headers=cookie, timeout=5).status_code == 200
    # ...but reporting activity is a runner's act: bearer token only.
    report = httpx.post(
        web.url + "/presence/activity", json={"state": "blocked"}, headers=cookie, timeout=5
    )
    assert report.status_code == 401
    assert report.json() == {"error": "missing or wrong bearer token"}
    assert "activity" not in web.roster_json()["alice"]


def test_a_cookie_without_its_key_is_no_session(web: Web) -> None:
    """A page on another port of this host is sent the cookie (cookies are not kept
    apart by port) and can plant its own; neither is a session without the key, which
    only the page's own origin can read."""
    alice = session_of(sign_in(web, token_of("alice")))
    builder = session_of(sign_in(web, token_of("builder")))
    forged = [
        {"cookie": alice["cookie"]},  # the cookie alone
        {"cookie": alice["cookie"], KEY_HEADER: builder[KEY_HEADER]},  # another's key
        {"cookie": alice["cookie"], KEY_HEADER: ""},
        {KEY_HEADER: alice[KEY_HEADER]},  # the key alone
        {"cookie": builder["cookie"], KEY_HEADER: alice[KEY_HEADER]},
    ]
    for headers in forged:
        for path in ("/whoami", "/roster", "/subscribe?name=alice"):
            response = httpx.get(web.url + path, headers=headers, timeout=5)
            assert response.status_code == 401, (path, headers)
    key_in_query = f"key={alice[KEY_HEADER]}"  # EventSource's way, on /subscribe only
    cookie = {"cookie": alice["cookie"]}
    who = httpx.get(f"{web.url}/whoami?{key_in_query}", headers=cookie, timeout=5)
    assert who.status_code == 401
    with httpx.stream(
        "GET", f"{web.url}/subscribe?name=alice&{key_in_query}", headers=cookie, timeout=5
    ) as stream:
        assert stream.status_code == 200
    for own in (alice, builder):
        assert httpx.get(web.url + "/whoami", headers=own, timeout=5).status_code == 200


def test_the_cookie_counts_only_on_the_pages_own_origin(web: Web) -> None:
    """SameSite=Strict lets a page on another port of this host make the browser send
    the cookie; the broker takes it only from its own origin."""
    cookie = session_of(sign_in(web, token_of("alice")))
    elsewhere = "http://127.0.0.1:1"  # another port: the same site, another origin
    for headers in ({"origin": elsewhere}, {"sec-fetch-site": "same-site"}, {"origin": "null"}):
        for path in ("/whoami", "/roster", "/subscribe?name=alice"):
            response = httpx.get(web.url + path, headers={**cookie, **headers}, timeout=5)
            assert response.status_code == 401, (path, headers)
            assert response.json()["error"] == (
                "missing or wrong bearer token, and no valid browser sign-in"
            )
    own = {"sec-fetch-site": "same-origin", "origin": web.url}
    assert httpx.get(web.url + "/whoami", headers={**cookie, **own}, timeout=5).status_code == 200
    typed = {"sec-fetch-site": "none"}  # the address typed or bookmarked
    assert httpx.get(web.url + "/whoami", headers={**cookie, **typed}, timeout=5).status_code == 200
    web.wait_connected("alice", 0)


def test_a_refused_sign_in_is_logged_with_the_address_it_came_from(
    web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codex_presence.web")
    assert sign_in(web, "cp_wrong").status_code == 401
    (refused,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert re.fullmatch(r"web sign-in refused from 127\.0\.0\.1:\d+", refused), refused


def test_a_bad_token_is_refused_without_a_cookie(web: Web) -> None:
    for token in ("cp_wrong", "", token_of("alice") + "x"):
        response = sign_in(web, token)
        assert response.status_code == 401, token
        assert "set-cookie" not in response.headers
    anonymous = httpx.get(web.url + "/whoami", headers={"cookie": f"{COOKIE_NAME}=guess"})
    assert anonymous.status_code == 401


def test_cross_site_sign_in_is_refused(web: Web) -> None:
    response = sign_in(web, token_of("alice"), origin="http://evil.example")
    assert response.status_code == 403
    assert "set-cookie" not in response.headers
    same_site = sign_in(web, token_of("alice"), origin=web.url)
    assert same_site.status_code == 200


def test_a_sign_in_body_that_never_ends_is_cut_off() -> None:
    """Sign-in needs no token to reach: a trickled body must not hold a connection."""
    import socket

    for web in make_web(limits=BrokerLimits(body_timeout=0.5)):
        port = int(web.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                b"POST /session HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000\r\n"
                b"content-type: application/x-www-form-urlencoded\r\n\r\nt"
            )
            answer = b""
            while chunk := conn.recv(4096):  # "connection: close": read to the end
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"the form took over 0.5 s" in answer


def test_sign_in_wants_a_form(web: Web) -> None:
    response = httpx.post(web.url + "/session", json={"token": token_of("alice")}, timeout=5)
    assert response.status_code == 415


def test_sign_out_forgets_the_session(web: Web) -> None:
    cookie = session_of(sign_in(web, token_of("builder")))
    without_key = httpx.post(
        web.url + "/session/logout", headers={"cookie": cookie["cookie"]}, timeout=5
    )
    assert without_key.status_code == 204  # the cookie expires; the session stays
    assert httpx.get(web.url + "/whoami", headers=cookie, timeout=5).status_code == 200
    response = httpx.post(web.url + "/session/logout", headers=cookie, timeout=5)
    assert response.status_code == 204
    assert f'{COOKIE_NAME}=""' in response.headers["set-cookie"]
    assert httpx.get(web.url + "/whoami", headers=cookie, timeout=5).status_code == 401


def test_sessions_expire_and_are_capped_per_member(store_url: str | None) -> None:
    """In memory the clock is moved by hand; in Redis, its own expiry times a session out
    (one of 2 s there, so that the look right after the sign-in sees it however loaded the
    machine: 0.5 s was one stall away; the cap is checked on sessions that last a minute)."""
    clock = FakeClock()
    links = []

    def roster(ttl: float, max_sessions: int = 2) -> WebRoster:
        if store_url is None:
            return WebRoster(team=TEAM, sign_in_ttl=ttl, max_sign_ins=max_sessions, clock=clock)
        shared = shared_state(store_url, TEAM, sign_in_ttl=ttl, max_sign_ins=max_sessions)
        links.append(shared.link)
        return WebRoster(team=TEAM, sign_ins=shared.sign_ins)

    lifetime = 0.5 if store_url is None else 2.0
    short, capped = roster(lifetime), roster(60)

    async def sign_in(web: WebRoster, token: str) -> SignedIn:
        signed_in = await web.sign_in(token)
        assert signed_in is not None
        return signed_in

    async def whose(web: WebRoster, session: SignedIn, key: str | None = None) -> str | None:
        member = await web.member_of(session.session_id, key or session.key)
        return None if member is None else member.name

    async def check() -> None:
        first = await sign_in(short, token_of("alice"))
        assert await whose(short, first) == "alice"
        if store_url is None:
            clock.advance(lifetime + 0.1)
        else:
            await anyio.sleep(lifetime + 0.1)
        assert await whose(short, first) is None
        builder = await sign_in(capped, token_of("builder"))
        a, b, c = [await sign_in(capped, token_of("alice")) for _ in range(3)]
        assert await whose(capped, b, key=c.key) is None  # the cookie is only half a session
        assert await whose(capped, a) is None  # alice's oldest made room for her third
        assert [await whose(capped, s) for s in (b, c, builder)] == ["alice", "alice", "builder"]
        assert await capped.sign_in("cp_wrong") is None

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for link in links:
                await tg.start(link.run)
            with anyio.fail_after(WAIT):
                await check()
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_signing_out_ends_the_sessions_open_stream(web: Web) -> None:
    cookie = session_of(sign_in(web, token_of("alice")))
    with (
        httpx.Client(base_url=web.url, timeout=10) as client,
        client.stream("GET", "/subscribe?name=alice", headers=cookie) as stream,
    ):
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines).startswith("retry:")
        web.wait_connected("alice", 1)
        logout = httpx.post(web.url + "/session/logout", headers=cookie, timeout=5)
        assert logout.status_code == 204
        for _ in lines:  # the stream ends (or the client's 10 s read timeout fails the test)
            pass
    web.wait_connected("alice", 0)


def test_the_page_and_assets_are_served_with_a_strict_csp(web: Web) -> None:
    page = httpx.get(web.url + "/", timeout=5)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert 'data-hide-delay="5000"' in page.text
    # Every src/href in the page is a path on this broker.
    for ref in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        assert ref.startswith("/static/"), ref
        assert httpx.get(web.url + ref, timeout=5).status_code == 200
    assert httpx.get(web.url + "/static/nope.js", timeout=5).status_code == 404


# -- the page in Chromium ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        msg = f"chromium is missing: {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    context: BrowserContext
    page: Page
    requests: list[str] = field(default_factory=list)
    other_origins: set[str] = field(default_factory=set)
    """Origins a test itself sends the tab to (the page never loads anything there)."""


@pytest.fixture
def tabs(browser: Browser, web: Web) -> Iterator[list[Tab]]:
    yield from checked_tabs(web)


def checked_tabs(web: Web) -> Iterator[list[Tab]]:
    """Browser contexts opened by a test; afterwards, every request they made must have
    gone to the broker on 127.0.0.1 (the page loads nothing external)."""
    opened: list[Tab] = []
    yield opened
    try:
        for tab in opened:
            assert tab.requests, "the page made no requests at all"
            for url in tab.requests:
                parts = urlsplit(url)
                assert parts.hostname == "127.0.0.1", url
                origin = f"{parts.scheme}://{parts.netloc}"
                assert origin == web.url or origin in tab.other_origins, url
    finally:
        for tab in opened:
            tab.context.close()


def open_tab(
    browser: Browser,
    web: Web,
    tabs: list[Tab],
    *,
    query: str = "",
    clock: bool = False,
    permissions: list[str] | None = None,
    init_script: str | None = None,
) -> Tab:
    context = browser.new_context(viewport={"width": 1100, "height": 520})
    if permissions:
        context.grant_permissions(permissions, origin=web.url)
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    tab = Tab(context, page)
    context.on("request", lambda request: tab.requests.append(request.url))
    page.set_default_timeout(10_000)
    tabs.append(tab)
    if clock:
        page.clock.install()
    page.goto(web.url + "/" + query)
    return tab


def signed_in(browser: Browser, web: Web, tabs: list[Tab], name: str, **kw: Any) -> Tab:
    tab = open_tab(browser, web, tabs, **kw)
    page = tab.page
    expect(page.locator("#signin")).to_be_visible()
    page.fill("#token", token_of(name))
    page.click("#signin-submit")
    expect(page.locator("body")).to_have_attribute("data-stream", "live")
    expect(page.locator("#me")).to_have_text(name)
    return tab


# Headless Chromium never hides a page by itself: override what the page reads, then
# send the event a real tab switch would.
_SET_VISIBILITY = """state => {
    const get = () => state;
    Object.defineProperty(document, 'visibilityState', {configurable: true, get});
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => get() === 'hidden'});
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def set_visibility(page: Page, state: str) -> None:
    page.evaluate(_SET_VISIBILITY, state)


def row(page: Page, name: str) -> Any:
    return page.locator(f'li.member[data-name="{name}"]')


@pytest.fixture
def watcher(web: Web) -> Iterator[subprocess.Popen[bytes]]:
    """builder's ``roster --watch``: a real subprocess holding a real SSE stream."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env["CODEX_PRESENCE_TOKEN"] = token_of("builder")
    proc = subprocess.Popen(
        [sys.executable, "-m", "codex_presence", "roster", "--broker", web.url, "--watch"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        web.wait_connected("builder", 1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(WAIT)


@pytest.mark.browser
def test_sign_in_in_the_browser(browser: Browser, web: Web, tabs: list[Tab]) -> None:
    tab = open_tab(browser, web, tabs)
    page = tab.page
    expect(page.locator("body")).to_have_attribute("data-view", "signin")
    page.fill("#token", "cp_not-a-member")
    page.click("#signin-submit")
    expect(page.locator("#signin-error")).to_have_text("That token is not a member’s token.")
    assert tab.context.cookies() == []

    page.fill("#token", token_of("alice"))
    page.click("#signin-submit")
    expect(page.locator("body")).to_have_attribute("data-view", "roster")
    (cookie,) = tab.context.cookies()
    assert cookie["name"] == COOKIE_NAME
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert token_of("alice") not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
    expect(page.locator("#token")).to_have_value("")
    key = page.evaluate(f"localStorage.getItem({KEY_ITEM!r})")
    assert key and token_of("alice") not in key

    page.click("#sign-out")
    expect(page.locator("body")).to_have_attribute("data-view", "signin")
    assert page.evaluate(f"localStorage.getItem({KEY_ITEM!r})") is None
    web.wait_connected("alice", 0)
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-view", "signin")


ATTACK = """<!doctype html><title>elsewhere</title><script>
(async () => {
  const broker = "%s";
  await fetch(broker + "/presence/activity", {
    method: "POST", mode: "no-cors", credentials: "include",
    body: new Blob(['{"state":"blocked"}']),
  });
  await new Promise(done => {
    const stream = new EventSource(broker + "/subscribe?name=alice", {withCredentials: true});
    stream.onerror = () => { stream.close(); done(); };
  });
  document.title = "done";
})();
</script>"""


@pytest.mark.browser
def test_a_page_on_another_port_cannot_use_the_cookie(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    """alice is signed in; a page on another port of the same host (same site, so the
    SameSite=Strict cookie goes along) tries to report her blocked and to hold a stream
    in her name. Neither counts."""
    tab = signed_in(browser, web, tabs, "alice")
    tab.page.close()  # her own page's stream closes: only the other page could count
    web.wait_connected("alice", 0)
    with serving_html(ATTACK % web.url) as elsewhere:  # another port: same site
        tab.other_origins.add(elsewhere)
        other = tab.context.new_page()
        other.goto(elsewhere + "/")
        expect(other).to_have_title("done")
        assert web.roster_json()["alice"]["connected"] == 0
    assert "activity" not in web.roster_json()["alice"]


PLANT = """<!doctype html><title>elsewhere</title><script>
document.cookie = "%s=%s; path=/";
document.title = "planted";
</script>"""


@pytest.mark.browser
def test_a_cookie_planted_from_another_port_signs_nobody_in(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    """builder signs in (over HTTP) and plants his session cookie from a page on another
    port of the same host: cookies are not kept apart by port, so alice's browser sends it
    to the broker. Her page is not signed in as builder: without its key, which only the
    broker's own origin holds, the cookie is no session. Once she signs in as herself, a
    script cannot replace her (HttpOnly) cookie, and the page stays hers."""
    builder = sign_in(web, token_of("builder"))
    plant = PLANT % (COOKIE_NAME, builder.cookies[COOKIE_NAME])
    tab = open_tab(browser, web, tabs)
    with serving_html(plant) as elsewhere:
        tab.other_origins.add(elsewhere)
        other = tab.context.new_page()
        other.goto(elsewhere + "/")
        expect(other).to_have_title("planted")
        assert [c["value"] for c in tab.context.cookies(web.url)] == [builder.cookies[COOKIE_NAME]]
        page = tab.page
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-view", "signin")
        expect(page.locator("#me")).not_to_have_text("builder")

        page.fill("#token", token_of("alice"))
        page.click("#signin-submit")
        expect(page.locator("#me")).to_have_text("alice")
        expect(page.locator("body")).to_have_attribute("data-stream", "live")
        other.reload()  # planted again: a script cannot replace her HttpOnly cookie
        expect(other).to_have_title("planted")
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-stream", "live")
        expect(page.locator("#me")).to_have_text("alice")
    assert web.roster_json()["builder"]["connected"] == 0


@pytest.mark.browser
def test_the_page_follows_a_member_working_blocked_idle(
    browser: Browser, web: Web, tabs: list[Tab], watcher: subprocess.Popen[bytes]
) -> None:
    page = signed_in(browser, web, tabs, "alice").page
    expect(page.locator("li.member")).to_have_count(3)
    names = page.locator("li.member .name").all_inner_texts()
    assert names == ["alice", "builder", "scout"]  # team-file order

    alice, builder, scout = row(page, "alice"), row(page, "builder"), row(page, "scout")
    expect(alice.locator(".you")).to_be_visible()
    expect(builder.locator(".you")).to_be_hidden()
    expect(alice.locator(".role")).to_have_text("director")
    expect(alice.locator(".bucket")).to_have_text("admin")
    expect(builder.locator(".role")).to_have_text("engineer")
    expect(builder.locator(".bucket")).to_be_hidden()
    expect(scout.locator(".bucket")).to_have_text("operator")
    # Connection dots with live counts: alice's own tab, builder's watcher, scout nobody.
    expect(alice.locator(".connection")).to_have_text("1 connected")
    expect(builder.locator(".connection")).to_have_text("1 connected")
    expect(builder.locator(".conn-dot")).to_have_class(re.compile(r"\bon\b"))
    expect(scout.locator(".connection")).to_have_text("offline")
    expect(scout.locator(".conn-dot")).not_to_have_class(re.compile(r"\bon\b"))
    expect(builder).to_have_attribute("data-activity", "idle")
    expect(builder.locator(".activity-icon")).to_have_class(re.compile(r"\bidle-dot\b"))

    # A second tab of alice's counts too, and the first tab sees it live.
    second = signed_in(browser, web, tabs, "alice").page
    expect(alice.locator(".connection")).to_have_text("2 connected")
    expect(row(second, "alice").locator(".connection")).to_have_text("2 connected")
    second.context.close()
    tabs.pop()
    expect(alice.locator(".connection")).to_have_text("1 connected")

    web.report("builder", "working")
    expect(builder).to_have_attribute("data-activity", "working")
    expect(builder.locator(".activity")).to_have_text("working")
    spinner = builder.locator(".activity-icon.spinner")
    expect(spinner).to_be_visible()
    assert spinner.evaluate("e => getComputedStyle(e).animationName") == "spin"
    expect(page.locator("#summary")).to_contain_text("1 working")

    web.report("builder", "blocked")
    expect(builder).to_have_attribute("data-activity", "blocked")
    expect(builder.locator(".activity")).to_have_text("needs input")
    expect(builder.locator(".activity-icon.needs-input-mark")).to_have_text("!")
    expect(builder.locator(".spinner")).to_have_count(0)
    expect(page.locator("#summary .chip.alert")).to_have_text("1 needs input")
    expect(page).to_have_title(re.compile(r"^\(1\) acme roster"))

    web.report("builder", "idle")
    expect(builder).to_have_attribute("data-activity", "idle")
    expect(builder.locator(".activity")).to_have_text("idle")
    expect(builder.locator(".activity-icon.idle-dot")).to_be_visible()
    expect(builder.locator(".needs-input-mark")).to_have_count(0)
    expect(page.locator("#summary .chip.alert")).to_have_count(0)

    # The watcher leaves: builder goes offline on the page, without a reload.
    watcher.terminate()
    watcher.wait(WAIT)
    expect(builder.locator(".connection")).to_have_text("offline")
    assert page.evaluate("window.codexPresence.opens") == 1


@pytest.mark.browser
def test_the_page_counts_a_members_busy_sessions(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    """Issue 23: two busy sessions of one member are counted on their row; one says
    nothing more."""
    page = signed_in(browser, web, tabs, "alice").page
    builder = row(page, "builder")
    web.report("builder", "working", "first-run")
    expect(builder.locator(".activity")).to_have_text("working")
    web.report("builder", "working", "second-run")
    expect(builder.locator(".activity")).to_have_text("working (2 working)")
    web.report("builder", "blocked", "second-run")
    expect(builder.locator(".activity")).to_have_text("needs input (1 working, 1 needs input)")
    expect(page.locator("#summary .chip.alert")).to_have_text("1 needs input")  # members
    web.report("builder", "idle", "second-run")
    expect(builder.locator(".activity")).to_have_text("working")
    web.report("builder", "idle", "first-run")
    expect(builder.locator(".activity")).to_have_text("idle")


@pytest.mark.browser
def test_the_page_reads_the_roster_by_a_conditional_get(
    browser: Browser, web: Web, wall: ShiftedClock, tabs: list[Tab]
) -> None:
    """Issue 37: the page's stream is a light one (``?light=1``): no roster on it, a
    ``changed`` event where a full stream sends one, and the page reads ``GET /roster``,
    sending back the ETag of the roster it read last; a roster unchanged since is a 304
    with no body. The broker's wall clock is held still, so that the page's reconnect
    leaves the roster as it was (``lastSeen`` ticks on every subscribe); the changes the
    stream carries between are applied on the rows as ever."""
    wall.frozen = time.time()
    web.report("builder", "idle")  # seen (createdAt, lastSeen) before the page reads
    tab = signed_in(browser, web, tabs, "alice", query=f"?hideDelay={HIDE_DELAY_MS}")
    page = tab.page
    assert any("light=1" in url for url in tab.requests if "/subscribe?" in url), tab.requests
    reads: list[tuple[int, str | None]] = []
    """Each GET /roster the page made from here: its status and the If-None-Match sent."""

    def logged(response: Any) -> None:
        if urlsplit(response.url).path == "/roster":
            reads.append((response.status, response.request.headers.get("if-none-match")))

    page.on("response", logged)
    builder = row(page, "builder")
    web.report("builder", "blocked")  # carried by the stream, not read
    expect(builder).to_have_attribute("data-activity", "blocked")
    expect(page.locator("#summary .chip.alert")).to_have_text("1 needs input")
    web.report("builder", "idle")
    expect(builder).to_have_attribute("data-activity", "idle")
    assert page.evaluate("window.codexPresence.reads") == {"200": 1}  # the first, alone

    # Hidden past the delay: the stream closes; visible again, the page reads the roster
    # with the ETag it has: alice is connected again, builder idle again: unchanged.
    set_visibility(page, "hidden")
    web.wait_connected("alice", 0)
    set_visibility(page, "visible")
    expect(page.locator("body")).to_have_attribute("data-stream", "live")
    seen = lambda: (page.evaluate("window.codexPresence.reads"), reads)  # noqa: E731
    eventually(
        lambda: page.evaluate("window.codexPresence.reads[304] === 1"), WAIT, "a 304", seen=seen
    )
    assert reads[-1][0] == 304 and reads[-1][1], reads  # it sent its ETag, got no body
    expect(row(page, "alice").locator(".connection")).to_have_text("1 connected")
    expect(builder).to_have_attribute("data-activity", "idle")
    expect(page.locator("li.member")).to_have_count(3)

    # Changed while hidden: the read is a 200 with the new roster, and it shows.
    set_visibility(page, "hidden")
    web.wait_connected("alice", 0)
    web.report("builder", "working")
    set_visibility(page, "visible")
    expect(builder).to_have_attribute("data-activity", "working")
    assert page.evaluate("window.codexPresence.reads") == {"200": 2, "304": 1}
    assert page.evaluate("window.codexPresence.opens") == 3


@pytest.mark.browser
def test_a_hidden_tab_lets_go_after_the_delay_and_comes_back(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    page = signed_in(browser, web, tabs, "alice", query=f"?hideDelay={HIDE_DELAY_MS}").page
    observer = signed_in(browser, web, tabs, "scout").page
    web.wait_connected("alice", 1)
    expect(row(observer, "alice").locator(".connection")).to_have_text("1 connected")

    # Tabbing away briefly does not touch the stream.
    set_visibility(page, "hidden")
    page.wait_for_timeout(HIDE_DELAY_MS // 4)
    set_visibility(page, "visible")
    page.wait_for_timeout(HIDE_DELAY_MS * 2)  # past the delay: a leftover timer would fire
    assert page.evaluate("[window.codexPresence.opens, window.codexPresence.closes]") == [1, 0]
    assert web.roster_json()["alice"]["connected"] == 1
    expect(page.locator("body")).to_have_attribute("data-stream", "live")

    # Hidden for longer than the delay: the stream closes and the broker counts it gone.
    set_visibility(page, "hidden")
    web.wait_connected("alice", 0)
    expect(page.locator("body")).to_have_attribute("data-stream", "paused")
    expect(row(observer, "alice").locator(".connection")).to_have_text("offline")
    assert page.evaluate("window.codexPresence.closes") == 1

    # Visible again: it subscribes again and catches up on what changed meanwhile.
    web.report("builder", "blocked")
    expect(row(observer, "builder")).to_have_attribute("data-activity", "blocked")
    set_visibility(page, "visible")
    web.wait_connected("alice", 1)
    expect(page.locator("body")).to_have_attribute("data-stream", "live")
    expect(row(page, "builder")).to_have_attribute("data-activity", "blocked")
    expect(row(observer, "alice").locator(".connection")).to_have_text("1 connected")
    assert page.evaluate("window.codexPresence.opens") == 2


@pytest.mark.browser
def test_last_active_is_shown_from_last_seen_and_ages(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    web.report("builder", "idle")  # an emit: builder's lastSeen is now
    page = signed_in(browser, web, tabs, "alice", clock=True).page
    builder, scout = row(page, "builder"), row(page, "scout")
    expect(builder.locator(".last-active")).to_have_text("last active just now")
    expect(scout.locator(".last-active")).to_have_text("never seen")
    page.clock.fast_forward("03:00")
    expect(builder.locator(".last-active")).to_have_text("last active 3 minutes ago")
    page.clock.fast_forward("58:00")
    expect(builder.locator(".last-active")).to_have_text("last active 1 hour ago")


@pytest.mark.browser
def test_a_session_that_ends_sends_the_page_back_to_sign_in(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    tab = signed_in(browser, web, tabs, "alice", query="?hideDelay=200")
    (cookie,) = tab.context.cookies()
    key = tab.page.evaluate(f"localStorage.getItem({KEY_ITEM!r})")
    session = {"cookie": f"{COOKIE_NAME}={cookie['value']}", KEY_HEADER: key}
    signed_out = httpx.post(web.url + "/session/logout", headers=session, timeout=5)
    assert signed_out.status_code == 204  # e.g. signed out from another tab
    # Hide and show, so that the page subscribes again with the dead session.
    set_visibility(tab.page, "hidden")
    web.wait_connected("alice", 0)
    set_visibility(tab.page, "visible")
    expect(tab.page.locator("body")).to_have_attribute("data-view", "signin")
    expect(tab.page.locator("#signin-reason")).to_have_text(
        "Your session ended (signed out elsewhere, or expired); sign in again."
    )


def test_the_broker_command_serves_the_page_and_takes_the_cookie(tmp_path: Path) -> None:
    """``codex-presence broker`` itself (a real subprocess) has the page and the sign-in."""
    from codex_presence.broker.team_file import render_team

    team_file = tmp_path / "team.toml"
    team_file.write_text(render_team("acme", [("alice", None, token_of("alice"))]))
    with broker_process("--team", str(team_file)) as broker:
        url = broker.url
        page = httpx.get(url + "/", timeout=5)
        assert page.status_code == 200 and 'id="members"' in page.text
        response = httpx.post(
            url + "/session",
            content=f"token={token_of('alice')}",
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=5,
        )
        cookie = session_of(response)
        assert httpx.get(url + "/whoami", headers=cookie, timeout=5).json()["name"] == "alice"


@pytest.mark.browser
def test_a_broker_restart_signs_nobody_out_and_a_lost_redis_shows_stale(
    browser: Browser,
) -> None:
    """With the sessions in Redis (issue 18): the page stays signed in while its broker is
    replaced by a new process's worth of state on the same port, and says "stale" while
    Redis hangs (and not after). (A Redis restarted without persistence has forgotten
    every session: that sends the page to sign in, rightly.)"""
    from tests.support.broker_harness import reserved_port
    from tests.support.redis_server import redis_server

    def broker(port: int, url: str) -> Any:
        shared = shared_state(url, TEAM)
        roster = WebRoster(team=TEAM, sign_ins=shared.sign_ins)
        running = running_broker(team=TEAM, port=port, web=roster, store=shared.store)
        return running, roster

    opened: list[Tab] = []
    with redis_server() as server, reserved_port() as sock:
        port = sock.getsockname()[1]
        sock.close()
        try:
            running, roster = broker(port, server.url)
            with running as first:
                page = signed_in(browser, Web(first, roster), opened, "alice").page
                Web(first, roster).report("builder", "working")
                expect(row(page, "builder")).to_have_attribute("data-activity", "working")
            running, roster = broker(port, server.url)  # the same broker, restarted
            with running as second:
                web = Web(second, roster)
                web.wait_connected("alice", 1)  # the page came back by itself
                expect(page.locator("body")).to_have_attribute("data-view", "roster")
                expect(page.locator("body")).to_have_attribute("data-stream", "live")
                expect(row(page, "builder")).to_have_attribute("data-activity", "working")
                web.report("builder", "blocked")
                expect(row(page, "builder")).to_have_attribute("data-activity", "blocked")

                server.pause()
                expect(page.locator("body")).to_have_attribute("data-stream", "stale")
                expect(page.locator("#stream")).to_contain_text("stale")
                # One notion of stale: the rows are marked as of when the broker said so.
                expect(page.locator("li.member[data-stale]")).to_have_count(3)
                expect(row(page, "builder").locator(".as-of")).to_have_text(
                    re.compile(r"^as of \d{1,2}:\d{2}")
                )
                server.resume()
                expect(page.locator("body")).to_have_attribute(
                    "data-stream", "live", timeout=20_000
                )
                expect(page.locator("body")).to_have_attribute("data-view", "roster")
                expect(page.locator("li.member[data-stale]")).to_have_count(0)
                expect(page.locator("#stale-note")).to_be_hidden()
        finally:
            for tab in opened:
                tab.context.close()


# -- what an operator needs (issue 15) -----------------------------------------------------


@pytest.mark.browser
def test_a_background_command_is_shown_apart_from_the_state(
    browser: Browser, web: Web, wall: ShiftedClock, tabs: list[Tab], store_url: str | None
) -> None:
    """Issue 23: an idle member whose session left a command running reads "idle · 1
    background command · 4 min"; it never sorts or counts them as busy; it goes with 0."""
    wall.offset = -4 * 60
    web.report("builder", "idle", "sessionAAAAAAAAA", background=1)
    wall.offset = 0
    page = signed_in(browser, web, tabs, "alice", clock=True).page
    builder = row(page, "builder")
    expect(builder.locator(".activity-col")).to_have_text(
        re.compile(r"^\s*idle\s*· 1 background command · 4 min\s*$")
    )
    expect(builder).to_have_attribute("data-activity", "idle")
    expect(page).to_have_title("acme roster")
    web.report("builder", "working", "sessionAAAAAAAAA", background=2)
    expect(builder.locator(".background")).to_have_text("· 2 background commands · 4 min")
    expect(builder.locator(".activity")).to_have_text("working")
    web.report("builder", "idle", "sessionAAAAAAAAA", background=0)
    expect(builder.locator(".background")).to_have_text("")


@pytest.mark.browser
def test_each_agent_has_a_line_under_its_member_and_markup_never_runs(
    browser: Browser, web: Web, wall: ShiftedClock, tabs: list[Tab], store_url: str | None
) -> None:
    """Issue 32: a line per agent session under the member: client in project, state, what
    a blocked one waits on and for how long; what the wire says is text, never markup."""
    wall.offset = -60
    blocked = {
        "client": "claude",
        "project": "api-server",
        "waits": {"kind": "command", "tool": "Bash", "program": "make"},
    }
    web.report("builder", "blocked", "sessionAAAAAAAAA", agent=blocked)
    wall.offset = 0
    evil = {"client": "codex-tui", "project": "<img src=x onerror=window.pwned=1>"}
    web.report("builder", "working", "sessionBBBBBBBBB", agent=evil)
    page = signed_in(browser, web, tabs, "alice", clock=True).page
    agents = row(page, "builder").locator(".agents li.agent")
    expect(agents).to_have_count(2)
    expect(agents.nth(0)).to_have_attribute("data-state", "blocked")
    expect(agents.nth(0)).to_have_text(
        re.compile(r"^\s*claude in api-server · needs input: approve `make`\s+· 1 min\s*$")
    )
    expect(agents.nth(1).locator(".agent-what")).to_have_text(
        "codex-tui in <img src=x onerror=window.pwned=1>"
    )
    expect(agents.nth(1).locator(".agent-state")).to_have_text("working")
    expect(agents.nth(1).locator(".agent-waits")).to_be_hidden()
    assert page.locator("li.agent img").count() == 0
    assert page.evaluate("window.pwned") is None
    screenshot(page, "agents", store_url)
    web.report("builder", "working", "sessionAAAAAAAAA", agent={"client": "claude"})
    claude = agents.filter(has=page.locator(".agent-what", has_text=re.compile("^claude$")))
    expect(claude.locator(".agent-state")).to_have_text("working")
    expect(claude.locator(".agent-waits")).to_be_hidden()
    expect(row(page, "alice").locator(".agents")).to_be_hidden()


def names_in_order(page: Page) -> list[str]:
    return [str(n) for n in page.locator("li.member .name").all_inner_texts()]


@pytest.mark.browser
def test_how_long_each_has_waited_and_the_longest_waiting_first(
    browser: Browser, web: Web, wall: ShiftedClock, tabs: list[Tab], store_url: str | None
) -> None:
    clock = wall
    clock.offset = -14 * 60  # builder has been working for 14 minutes...
    web.report("builder", "working")
    clock.offset = 0
    web.report("builder", "working")  # ...and heartbeats now: lastSeen is now
    page = signed_in(browser, web, tabs, "alice", clock=True).page
    builder, scout = row(page, "builder"), row(page, "scout")
    expect(builder.locator(".activity")).to_have_text("working")
    expect(builder.locator(".since")).to_have_text("· 14 min")
    expect(builder.locator(".last-active")).to_have_text("last active just now")
    expect(page).to_have_title("acme roster")
    screenshot(page, "roster-working", store_url)

    clock.offset = -2 * 60 - 5
    web.report("scout", "blocked")
    clock.offset = 0
    expect(scout.locator(".activity-col")).to_have_text(re.compile(r"needs input\s*· 2 min\s*$"))
    # Needs input first, then working, then the rest in team order.
    expect(page.locator("li.member .name")).to_have_text(["scout", "builder", "alice"])
    expect(page).to_have_title("(1) acme roster")
    screenshot(page, "roster-needs-input", store_url)

    # The durations advance with the clock (the page's, moved on a minute).
    page.clock.fast_forward("01:00")
    expect(scout.locator(".since")).to_have_text("· 3 min")
    expect(builder.locator(".since")).to_have_text("· 15 min")

    web.report("builder", "blocked")  # blocked now: later than scout, so after scout
    expect(builder.locator(".since")).to_have_text("· 1 min")  # the page's clock is 1 min on
    expect(page.locator("li.member .name")).to_have_text(["scout", "builder", "alice"])
    web.report("scout", "idle")  # back in team order among the idle
    expect(scout.locator(".since")).to_have_text("")
    expect(page.locator("li.member .name")).to_have_text(["builder", "alice", "scout"])
    page.select_option("#sort", "team")
    assert names_in_order(page) == ["alice", "builder", "scout"]
    page.reload()  # the choice is kept
    expect(page.locator("#sort")).to_have_value("team")
    expect(page.locator("li.member")).to_have_count(3)
    assert names_in_order(page) == ["alice", "builder", "scout"]


@pytest.mark.browser
def test_needs_input_counts_from_the_start_of_the_wait_across_agents(
    browser: Browser, web: Web, wall: ShiftedClock, tabs: list[Tab]
) -> None:
    """Two of scout's agents wait, the first since 5 min, the second since 2 min; the first
    is answered while the second still waits. The broker's since moves to the second's;
    the page goes on counting from the start of the wait (issue 34: it jumped back)."""
    clock = wall
    page = signed_in(browser, web, tabs, "alice", clock=True).page
    scout = row(page, "scout")
    clock.offset = -5 * 60
    web.report("scout", "blocked", session="agentA", agent={"client": "claude", "project": "a"})
    clock.offset = -2 * 60
    web.report("scout", "blocked", session="agentB", agent={"client": "claude", "project": "b"})
    clock.offset = 0
    expect(scout.locator(".agent")).to_have_count(2)
    expect(scout.locator(".since")).to_have_text("· 5 min")
    web.report("scout", "idle", session="agentA")  # the first answered; the second waits
    expect(scout.locator(".agent")).to_have_count(1)
    expect(scout.locator(".activity")).to_have_text("needs input")
    expect(scout.locator(".since")).to_have_text("· 5 min")
    web.report("scout", "idle", session="agentB")
    expect(scout.locator(".since")).to_have_text("")


@pytest.mark.browser
def test_the_tab_title_counts_the_members_who_need_input(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    page = signed_in(browser, web, tabs, "alice").page
    expect(page).to_have_title("acme roster")
    web.report("builder", "blocked")
    expect(page).to_have_title("(1) acme roster")
    web.report("scout", "blocked")
    expect(page).to_have_title("(2) acme roster")
    web.report("builder", "working")
    expect(page).to_have_title("(1) acme roster")
    web.report("scout", "idle")
    expect(page).to_have_title("acme roster")


SPY_ON_NOTIFICATIONS = """
window.permissionAsked = 0;
if (window.Notification) {
  const ask = Notification.requestPermission.bind(Notification);
  Notification.requestPermission = (...args) => { window.permissionAsked++; return ask(...args); };
}
"""
"""Counts the page's calls to ``Notification.requestPermission`` (an init script: it runs
before the page's own)."""


@pytest.mark.browser
def test_notify_me_asks_permission_only_when_turned_on_and_notifies_on_blocked(
    browser: Browser, web: Web, tabs: list[Tab]
) -> None:
    allowed = signed_in(
        browser, web, tabs, "alice", permissions=["notifications"], init_script=SPY_ON_NOTIFICATIONS
    ).page
    toggle = allowed.locator("#notify")
    expect(toggle).not_to_be_checked()
    web.report("builder", "blocked")  # off: no notification
    expect(row(allowed, "builder")).to_have_attribute("data-activity", "blocked")
    assert allowed.evaluate("[window.permissionAsked, window.codexPresence.notices.length]") == [
        0,
        0,
    ]
    web.report("builder", "working")
    expect(row(allowed, "builder")).to_have_attribute("data-activity", "working")
    toggle.check()  # permission granted to this origin already: nothing to ask
    expect(toggle).to_be_checked()
    web.report("builder", "blocked")
    expect(row(allowed, "builder")).to_have_attribute("data-activity", "blocked")
    eventually(lambda: allowed.evaluate("window.codexPresence.notices.length") == 1, 60)
    assert allowed.evaluate("window.codexPresence.notices[0]") == {
        "title": "builder needs input",
        "body": "acme: builder is waiting on a person.",
    }
    web.report("builder", "blocked")  # a heartbeat: not a new block, no new notification
    web.report("scout", "working")
    expect(row(allowed, "scout")).to_have_attribute("data-activity", "working")
    assert allowed.evaluate("window.codexPresence.notices.length") == 1
    waits = {"kind": "command", "program": "make"}  # issue 32: which agent, on what, where
    agent = {"client": "claude", "project": "api-server", "waits": waits}
    web.report("scout", "blocked", "sessionSSSSSSSSS", agent=agent)
    eventually(lambda: allowed.evaluate("window.codexPresence.notices.length") == 2, WAIT)
    assert allowed.evaluate("window.codexPresence.notices[1]") == {
        "title": "scout needs input",
        "body": "acme: scout · claude in api-server: approve `make`",
    }
    allowed.reload()  # the choice is kept (the permission still holds); nothing is asked
    expect(allowed.locator("#notify")).to_be_checked()
    assert allowed.evaluate("window.permissionAsked") == 0

    # A browser that has not decided: loading asks nothing; turning it on asks once, and
    # a refusal (headless Chromium refuses) turns it back off, saying why.
    asked = signed_in(browser, web, tabs, "scout", init_script=SPY_ON_NOTIFICATIONS).page
    assert asked.evaluate("[Notification.permission, window.permissionAsked]") == ["default", 0]
    asked.locator("#notify").check(force=True)  # unchecked again as soon as it is refused
    expect(asked.locator("#notify-hint")).to_contain_text("Notifications are blocked")
    expect(asked.locator("#notify")).not_to_be_checked()
    assert asked.evaluate("window.permissionAsked") == 1


@pytest.mark.browser
def test_a_broker_restart_marks_the_rows_stale_then_says_why_the_session_ended(
    browser: Browser,
) -> None:
    """In memory, a restart ends every session. While the broker is away the rows are
    marked stale, as of when the stream was lost, and nothing in them looks live; once it
    is back, the sign-in form says the broker restarted."""
    from tests.support.broker_harness import reserved_port

    opened: list[Tab] = []
    with reserved_port() as sock:
        port = sock.getsockname()[1]
        sock.close()
        try:
            clock = ShiftedClock()
            for first in make_web(wall_clock=clock, port=port):
                clock.offset = -6 * 60
                first.report("builder", "working")
                clock.offset = 0
                page = signed_in(browser, first, opened, "alice", clock=True).page
                builder = row(page, "builder")
                expect(builder.locator(".since")).to_have_text("· 6 min")
                expect(page.locator("li.member[data-stale]")).to_have_count(0)
                expect(page.locator("#stale-note")).to_be_hidden()
            # The broker is gone: the rows stay, marked stale as of now.
            stream = page.locator("body")
            expect(stream).to_have_attribute("data-stream", re.compile("reconnecting|offline"))
            expect(page.locator("li.member[data-stale]")).to_have_count(3)
            as_of = re.compile(r"^as of \d{1,2}:\d{2}( [AP]M)?$")
            expect(builder.locator(".as-of")).to_have_text(as_of)
            expect(page.locator("#stale-note")).to_have_text(
                re.compile(r"^Not live: these rows show the roster as of \d{1,2}:\d{2}")
            )
            # alice's own tab was connected: her count no longer looks live.
            colour = "e => getComputedStyle(e).backgroundColor"
            alice_dot = row(page, "alice").locator(".conn-dot").evaluate(colour)
            assert alice_dot == row(page, "scout").locator(".conn-dot").evaluate(colour)
            screenshot(page, "roster-stale")
            page.clock.fast_forward("03:00")  # the clock moves on; the durations do not
            expect(builder.locator(".since")).to_have_text("· 6 min")
            for second in make_web(port=port):  # the same broker, restarted: nobody known
                expect(page.locator("body")).to_have_attribute(
                    "data-view", "signin", timeout=20_000
                )
                expect(page.locator("#signin-reason")).to_have_text(
                    "The broker restarted; sign in again."
                )
                expect(page.locator("li.member")).to_have_count(0)
                page.fill("#token", token_of("alice"))
                page.click("#signin-submit")
                expect(page.locator("body")).to_have_attribute("data-stream", "live")
                expect(page.locator("#signin-reason")).to_be_hidden()
                expect(page.locator("li.member[data-stale]")).to_have_count(0)
                second.wait_connected("alice", 1)
        finally:
            for tab in opened:
                tab.context.close()


# -- the notification targets, for an admin (issue 25) -------------------------------------

NOTIFY_SECRET = "pw-s3cret-notify"
"""The password in a target's URL: the page never holds it."""
HOSTILE_NAME = '<img src=x onerror="document.title=1">down hook'
"""A target's name from configuration, drawn as text."""


@dataclass
class NotifyingWeb:
    web: Web
    notifier: Notifier
    hook: Receiver
    """The second target's receiver: it answers 500, so that target fails."""


@pytest.fixture
def notifying() -> Iterator[NotifyingWeb]:
    """A broker with the web roster, ``GET /notify`` and two targets: one for everyone,
    blocked after 45 s, behind a URL with a password (nothing listens there: no one is
    blocked that long); one named, for builder only, at once, that keeps failing (two
    quick attempts, then given up)."""
    with receiver(status=500) as hook:
        targets = [
            Target(url=f"json://bot:{NOTIFY_SECRET}@127.0.0.1:9/h", rule=Rule(after=45)),
            Target(
                url=f"json://{hook.host}/down",
                rule=Rule(after=0, members=frozenset({"builder"})),
                name=HOSTILE_NAME,
            ),
        ]
        notifier = Notifier(
            targets,
            team="acme",
            sender=AppriseSender(),
            attempts=2,
            backoff=lambda: Backoff(base=0.01, cap=0.05),
            recheck=0.05,
            max_sleep=0.05,
        )
        roster = WebRoster(team=TEAM)
        with running_broker(
            team=TEAM,
            keepalive=30,
            web=roster,
            watcher=notifier,
        ) as broker:
            yield NotifyingWeb(Web(broker, roster), notifier, hook)


@pytest.fixture
def notify_tabs(browser: Browser, notifying: NotifyingWeb) -> Iterator[list[Tab]]:
    yield from checked_tabs(notifying.web)


def asked_for_targets(tab: Tab) -> int:
    return sum(urlsplit(url).path == "/notify" for url in tab.requests)


@pytest.mark.browser
def test_an_admin_sees_the_notification_targets_never_their_secrets(
    browser: Browser, notifying: NotifyingWeb, notify_tabs: list[Tab]
) -> None:
    """alice (an admin) signs in: one line per target, the URL's password masked, the
    configured name drawn as text; once the failing target has given up, the next refresh
    (every 30 s: the page's clock is moved on) says "failing: <error>"."""
    web = notifying.web
    tab = signed_in(browser, web, notify_tabs, "alice", clock=True)
    page = tab.page
    section = page.locator("#notify-targets")
    expect(section).to_be_visible()
    lines = section.locator("li.notify-target")
    expect(lines).to_have_count(2)
    secret, down = lines.nth(0), lines.nth(1)
    expect(secret.locator(".notify-label")).to_contain_text("json://bot:")
    expect(secret).to_contain_text("needs input after 45 s")
    expect(secret).to_contain_text("for everyone")
    expect(secret).to_contain_text("0 sent, 0 given up")
    expect(down.locator(".notify-label")).to_have_text(HOSTILE_NAME)  # text, not markup
    expect(down).to_contain_text("needs input after 0 s")
    expect(down).to_contain_text("for builder")
    expect(down).not_to_have_attribute("data-failing", "true")
    assert section.locator("img").count() == 0
    assert NOTIFY_SECRET not in page.content()
    assert asked_for_targets(tab) == 1

    web.report("builder", "blocked")
    eventually(lambda: notifying.notifier.stats[1].given_up == 1, what="the target given up")
    assert len(notifying.hook.requests) == 2  # both attempts reached it
    page.clock.run_for(30_000)
    expect(down).to_have_attribute("data-failing", "true")
    expect(down.locator(".notify-failing")).to_contain_text("failing: ")
    expect(down).to_contain_text("0 sent, 1 given up")
    assert asked_for_targets(tab) >= 2
    assert NOTIFY_SECRET not in page.content()
    expect(page).not_to_have_title("1")


@pytest.mark.browser
def test_an_operator_sees_no_notifications_and_the_page_never_asks(
    browser: Browser, notifying: NotifyingWeb, notify_tabs: list[Tab]
) -> None:
    """scout (an operator): the first roster says so, and the page neither shows the
    section nor asks ``/notify`` (no 403 in the broker's log or the console)."""
    tab = signed_in(browser, notifying.web, notify_tabs, "scout", clock=True)
    page = tab.page
    expect(page.locator("li.member")).to_have_count(3)
    page.clock.run_for(60_000)  # two refreshes' worth
    expect(page.locator("#notify-targets")).to_be_hidden()
    assert page.locator("li.notify-target").count() == 0
    assert asked_for_targets(tab) == 0
