"""``codex-presence roster``: the team roster from a broker, once or live."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

HELP = "print the team roster from a broker (--watch: live)"

_EPILOG = """\
The token comes from --token-file FILE or $CODEX_PRESENCE_TOKEN. --watch holds a
subscription (so you count as connected) and redraws on every change: a spinner for a
member who is working, "needs input" for one who is blocked.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from ._client import add_client_options

    parser.epilog = _EPILOG
    add_client_options(parser)
    parser.add_argument("--json", action="store_true", help="print the raw roster JSON")
    parser.add_argument("--watch", action="store_true", help="redraw live from the SSE stream")


def run(args: argparse.Namespace) -> int:
    import sys

    import anyio
    import httpx

    from ._cli import UsageError, setup_logging
    from ._client import TokenError, make_client, read_token
    from ._roster import roster_text

    setup_logging(quiet=True)
    try:
        token = read_token(token_file=args.token_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if not args.broker:
        raise UsageError("no broker: pass --broker URL or set CODEX_PRESENCE_BROKER")
    try:
        with make_client(args.broker, token) as client:
            me = _get(client, "/whoami")
            if args.name and args.name != me["name"]:
                raise UsageError(f"the token is {me['name']!r}'s, not {args.name!r}'s")
            if args.watch:
                try:
                    anyio.run(_watch, args.broker, token, me["name"])
                except _BrokerError as exc:  # raised outside any task group, so not grouped
                    sys.stderr.write(f"codex-presence roster: {exc}\n")
                    return 1
            roster = _get(client, "/roster")
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
        sys.stdout.write(roster_text(me["team"], roster, you=me["name"]) + "\n")
    return 0


class _BrokerError(Exception):
    pass


def _get(client: Any, path: str) -> Any:
    response = client.get(path)
    if response.status_code == 401:
        raise _BrokerError(f"the broker at {client.base_url} refused the token (401)")
    if response.status_code != 200:
        raise _BrokerError(f"GET {path}: HTTP {response.status_code} {response.text[:200]}")
    return response.json()


async def _watch(broker: str, token: str, me: str) -> None:
    """Draw the roster, then redraw on every event; animate the spinner while anyone works."""
    import sys

    import anyio
    import httpx
    import orjson
    from httpx_sse import aconnect_sse

    from ._client import make_async_client
    from ._roster import watch_text

    tty = sys.stdout.isatty()
    team = ""
    members: dict[str, dict[str, Any]] = {}
    frame = 0
    last = ""

    def draw() -> None:
        nonlocal last
        text = watch_text(team, members.values(), you=me, frame=frame)
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

    async def follow(client: httpx.AsyncClient) -> str:
        nonlocal team, members
        timeout = httpx.Timeout(5.0, read=None)
        options: dict[str, Any] = {"params": {"name": me}, "timeout": timeout}
        try:
            async with aconnect_sse(client, "GET", "/subscribe", **options) as sse:
                if sse.response.status_code != 200:
                    await sse.response.aread()
                    return f"subscribe: HTTP {sse.response.status_code} {sse.response.text[:200]}"
                async for event in sse.aiter_sse():
                    data = orjson.loads(event.data) if event.data else None
                    if event.event == "roster" and isinstance(data, dict):
                        team = data["team"]
                        members = {p["name"]: p for p in data["members"]}
                    elif event.event == "presence" and isinstance(data, dict):
                        members[data["name"]] = data
                    else:
                        continue
                    draw()
        except httpx.HTTPError as exc:
            return f"lost the stream from {broker}: {exc}"
        return "the broker closed the stream"

    async with make_async_client(broker, token) as client, anyio.create_task_group() as tg:
        tg.start_soon(spin)
        error = await follow(client)
        tg.cancel_scope.cancel()
    raise _BrokerError(error)
