"""The HTTP pieces that the broker's endpoints and the web roster share.

JSON responses and errors (``{"error": reason}``), and :func:`read_body`: the one way a
request body is read — a size cap enforced while reading (a huge body is never buffered),
a deadline for the whole body, and a client that went away — each ending in a precise 4xx
(:class:`Refused`) rather than a hung or buffered connection.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from codex_presence._wire import Refused

__all__ = ["error", "json_response", "read_body"]


def json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status, headers, media_type="application/json")


def error(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    return json_response(status, {"error": reason}, headers)


async def read_body(request: Request, *, limit: int, within: float, what: str = "body") -> bytes:
    """The request's body, at most ``limit`` bytes, all within ``within`` seconds; else
    :class:`Refused` (413, 408, or 400 for a bad Content-Length or a client gone)."""
    too_big = Refused(413, f"the {what} is limited to {limit} bytes", close=True)
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise Refused(400, "bad Content-Length")
        if int(length) > limit:
            raise too_big
    body = b""
    try:
        with anyio.fail_after(within):  # a body that never ends costs the timeout, no more
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_big
    except ClientDisconnect:
        raise Refused(400, "the client went away") from None
    except TimeoutError:
        raise Refused(408, f"the {what} took over {within:g} s", close=True) from None
    return body
