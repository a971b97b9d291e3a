"""The HTTP pieces that the broker's endpoints and the web roster share.

JSON responses and errors (``{"error": reason}``), :func:`read_body`: the one way a
request body is read — a size cap enforced while reading (a huge body is never buffered),
a deadline for the whole body, and a client that went away — each ending in a precise 4xx
(:class:`Refused`) rather than a hung or buffered connection; and :class:`Revalidated`, a
body served with its ``ETag`` (304 to a client that has it) and gzip'd for a client that
asks, both kept until the body changes (``GET /roster``: half a megabyte at 4,000 members).
"""

from __future__ import annotations

import gzip
import hashlib
from typing import Any

import anyio
import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from codex_presence._wire import Refused

__all__ = ["Revalidated", "error", "json_response", "read_body"]


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


GZIP_AT_LEAST = 256
"""Bodies shorter than this go as they are: gzip's frame would cost more than it saves."""


class Revalidated:
    """A JSON body as it is served again and again: its ``ETag`` (a client that sends it
    back in ``If-None-Match`` gets 304 and no body) and its gzip'd form (for a client whose
    ``Accept-Encoding`` names gzip), both made once per body: the next request with the
    same body costs a comparison of bytes."""

    def __init__(self) -> None:
        self._body = b""
        self._etag = ""
        self._gzipped: bytes | None = None

    def response(self, request: Request, body: bytes) -> Response:
        if body != self._body or not self._etag:
            self._body = body
            # Weak: the plain and the gzip'd bodies share it (a strong validator must
            # differ between content-codings, RFC 9110 8.8.3), and If-None-Match compares
            # weakly anyway.
            self._etag = 'W/"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
            self._gzipped = None
        headers = {"etag": self._etag, "cache-control": "no-cache", "vary": "accept-encoding"}
        if self._etag in _listed(request.headers.get("if-none-match", "")):
            return Response(status_code=304, headers=headers)
        if len(body) >= GZIP_AT_LEAST and "gzip" in _listed(
            request.headers.get("accept-encoding", "")
        ):
            if self._gzipped is None:
                self._gzipped = gzip.compress(body, compresslevel=1, mtime=0)
            headers["content-encoding"] = "gzip"
            return Response(self._gzipped, headers=headers, media_type="application/json")
        return Response(body, headers=headers, media_type="application/json")


def _listed(header: str) -> set[str]:
    """The items of a comma-separated header, their parameters (``;q=…``) left out."""
    return {item.partition(";")[0].strip() for item in header.split(",")}
