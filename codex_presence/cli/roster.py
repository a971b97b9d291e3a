"""``codex-presence roster``: the team roster from a broker, once or live."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from codex_presence.client.auth import Whoami

HELP = "print the team roster from a broker (--watch: live)"

_EPILOG = """\
The token comes from --token-file FILE or $CODEX_PRESENCE_TOKEN. --watch holds a
subscription (so you count as connected) and redraws on every change: a spinner for a
member who is working, "needs input" for one who is blocked. When the stream is lost
(the broker restarted, the network dropped) it says so under the last roster and
reconnects with backoff; only a refused token, or Ctrl-C, ends it.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from codex_presence.client.auth import add_client_options

    parser.epilog = _EPILOG
    add_client_options(parser)
    parser.add_argument("--json", action="store_true", help="print the raw roster JSON")
    parser.add_argument("--watch", action="store_true", help="redraw live from the SSE stream")


def run(args: argparse.Namespace) -> int:
    import sys

    import anyio
    import httpx

    from codex_presence.cli.main import UsageError, setup_logging
    from codex_presence.client.auth import TokenError, make_client, read_token
    from codex_presence.client.roster_text import roster_text

    setup_logging(quiet=True)
    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if not args.broker:
        raise UsageError("no broker: pass --broker URL or set CODEX_PRESENCE_BROKER")
    try:
        with make_client(args.broker, token) as client:
            me = _whoami(client)
            if args.name and args.name != me.name:
                raise UsageError(f"the token is {me.name!r}'s, not {args.name!r}'s")
            if args.watch:
                try:
                    anyio.run(_watch, args.broker, token, me.name)
                except _BrokerError as exc:  # raised outside any task group, so not grouped
                    sys.stderr.write(f"codex-presence roster: {exc}\n")
                    return 1
            roster = _roster(client)
    except httpx.HTTPError as exc:
        sys.stderr.write(f"codex-presence roster: cannot reach {args.broker}: {exc}\n")
        return 1
    except _BrokerError as exc:
        sys.stderr.write(f"codex-presence roster: {exc}\n")
        return 1
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(roster).decode() + "\n")
    else:
        sys.stdout.write(roster_text(me.team, roster, you=me.name) + "\n")
    return 0


class _BrokerError(Exception):
    pass


def _get(client: Any, path: str) -> Any:
    """The 200 response to ``GET path``, or :class:`_BrokerError` saying why not."""
    response = client.get(path)
    if response.status_code == 401:
        raise _BrokerError(f"the broker at {client.base_url} refused the token (401)")
    if response.status_code != 200:
        raise _BrokerError(f"GET {path}: HTTP {response.status_code} {response.text[:200]}")
    return response


def _not_a_broker(client: Any, response: Any, path: str) -> _BrokerError:
    kind = response.headers.get("content-type", "no content type")
    return _BrokerError(
        f"GET {path}: {client.base_url} answered {kind}, not a codex-presence broker's JSON"
    )


def _whoami(client: Any) -> Whoami:
    from codex_presence.client.auth import parse_whoami

    response = _get(client, "/whoami")
    me = parse_whoami(response.content)
    if me is None:
        raise _not_a_broker(client, response, "/whoami")
    return me


def _roster(client: Any) -> Any:
    response = _get(client, "/roster")
    try:
        return response.json()
    except ValueError:
        raise _not_a_broker(client, response, "/roster") from None


async def _watch(broker: str, token: str, me: str) -> None:
    """Draw the roster, then redraw on every event; animate the spinner while anyone works.

    A lost stream (the broker restarted, the network dropped) is retried with backoff, the
    last roster staying on screen under a line that says so; only a refused token ends it.
    """
    import sys

    import anyio
    import httpx
    import orjson
    from httpx_sse import aconnect_sse

    from codex_presence.client.auth import make_async_client
    from codex_presence.client.roster_text import watch_text
    from codex_presence.core.report_policy import Backoff

    tty = sys.stdout.isatty()
    team = ""
    members: dict[str, dict[str, Any]] = {}
    status = ""
    """Empty while the stream is live; otherwise why it is not, shown under the roster."""
    frame = 0
    last = ""

    def draw() -> None:
        nonlocal last
        text = watch_text(team, members.values(), you=me, frame=frame)
        if status:
            text += f"\n({status})"
        if text == last:
            return
        last = text
        if tty:
            sys.stdout.write("\x1b[H\x1b[J" + text + "\n")
        else:
            sys.stdout.write(text + "\n\n")
        sys.stdout.flush()

    async def spin() -> None:
        nonlocal frame
        while True:
            await anyio.sleep(0.1)
            if tty and any(p.get("activity") == "working" for p in members.values()):
                frame += 1
                draw()

    async def follow(client: httpx.AsyncClient) -> tuple[str, bool]:
        """One subscription; returns why it ended and whether anything came through."""
        nonlocal team, members, status
        # The broker sends a keep-alive every 15 s: a silent stream is a dead one.
        timeout = httpx.Timeout(5.0, read=_READ_TIMEOUT)
        options: dict[str, Any] = {"params": {"name": me}, "timeout": timeout}
        live = False
        try:
            async with aconnect_sse(client, "GET", "/subscribe", **options) as sse:
                code = sse.response.status_code
                if code in (401, 403):
                    raise _BrokerError(f"the broker at {broker} refused the token ({code})")
                if code != 200:
                    await sse.response.aread()
                    return f"subscribe: HTTP {code} {sse.response.text[:200]}", live
                async for event in sse.aiter_sse():
                    try:
                        data = orjson.loads(event.data) if event.data else None
                    except orjson.JSONDecodeError:
                        continue  # not a broker's event: nothing to draw from it
                    if event.event == "roster" and isinstance(data, dict):
                        team = data["team"]
                        members = {p["name"]: p for p in data["members"]}
                        live, status = True, ""
                    elif event.event == "presence" and isinstance(data, dict):
                        members[data["name"]] = data
                    else:
                        continue
                    draw()
        except httpx.HTTPError as exc:
            return f"lost the stream from {broker}: {exc or type(exc).__name__}", live
        return f"the broker at {broker} closed the stream", live

    backoff = Backoff(base=0.5, cap=10.0)
    refused: _BrokerError | None = None
    async with make_async_client(broker, token) as client, anyio.create_task_group() as tg:
        tg.start_soon(spin)
        while True:
            try:
                why, live = await follow(client)
            except _BrokerError as exc:
                refused = exc
                break
            if live:
                backoff.reset()
            delay = backoff.next_delay()
            status = f"{why}; reconnecting in {delay:.1f} s"
            draw()
            await anyio.sleep(delay)
        tg.cancel_scope.cancel()
    assert refused is not None  # the loop ends only there
    raise refused  # outside the task group, so not wrapped in an exception group


_READ_TIMEOUT = 45.0
