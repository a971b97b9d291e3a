"""The one adapter to jsonrpcserver: routes an app-server message to its handler.

jsonrpcserver does the routing (method lookup, binding the params to the handler's
signature, the call). Its outer layers parse and validate JSON-RPC 2.0 text, which codex is
not (it omits ``"jsonrpc"``) and which is parsed already, so only its routing step is called.
Nothing else in the package imports jsonrpcserver.

Two things jsonrpcserver does are not passed on to the mapping:

* Its ``call()`` catches every exception and turns it into an error result, with the
  traceback on jsonrpcserver's own logger (outside ``--log-file``, on Python's last-resort
  handler at best). Here each handler runs inside a guard: :class:`WrongShape` (the
  message's fault) is :attr:`Outcome.WRONG_SHAPE`, any other exception (a bug) is logged
  through the package's logger with its traceback and is :attr:`Outcome.INTERNAL_ERROR`.
  Either way the next message is routed as usual.
* Its handlers return a jsonrpcserver result; handlers routed here return ``None`` and know
  nothing of jsonrpcserver. They check their params with :func:`str_param`,
  :func:`object_param` and :func:`request_id_param`, which raise :class:`WrongShape`.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from jsonrpcserver import Success
from jsonrpcserver.dispatcher import dispatch_request
from jsonrpcserver.request import Request
from jsonrpcserver.sentinels import NOID

__all__ = [
    "Handler",
    "Outcome",
    "Router",
    "WrongShape",
    "object_param",
    "request_id_param",
    "str_param",
]

logger = logging.getLogger("codex_presence.router")

Handler = Callable[..., None]
"""Called with the router's context first and the message's params as keyword arguments."""


class WrongShape(ValueError):
    """Raised by a handler for params of the wrong type: the message's fault, not a bug.
    The ``*_param`` checks below raise it."""


def str_param(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise WrongShape(f"{what} is not a string")
    return value


def object_param(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WrongShape(f"{what} is not an object")
    return value


def request_id_param(value: object) -> Hashable:
    # bool is an int subclass; a JSON id is an integer or a string, nothing else.
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise WrongShape("request id is neither integer nor string")
    return value


class Outcome(enum.Enum):
    """What became of one routed message."""

    HANDLED = "handled"
    WRONG_SHAPE = "wrong_shape"
    """The params did not fit the handler's signature, or it raised :class:`WrongShape`."""
    INTERNAL_ERROR = "internal_error"
    """The handler raised anything else: a bug, logged with its traceback."""


_SUCCESS = Success()


class Router:
    """Routes ``(method, params)`` to the handler of that method, through jsonrpcserver."""

    def __init__(self, routes: Mapping[str, Handler]) -> None:
        guarded: dict[Handler, Callable[..., Any]] = {}
        self._methods = {
            method: guarded.setdefault(handler, self._guard(handler))
            for method, handler in routes.items()
        }
        self._outcome = Outcome.WRONG_SHAPE
        self._error: Exception | None = None

    def route(self, context: object, method: str, params: dict[str, Any]) -> Outcome:
        """Call the handler of ``method`` with ``context`` and ``params``; never raises
        for what a handler does."""
        self._outcome = Outcome.WRONG_SHAPE  # stays so when the params do not bind
        dispatch_request(self._methods, context, Request(method, params, NOID))
        outcome = self._outcome
        if outcome is Outcome.INTERNAL_ERROR:
            error, self._error = self._error, None
            logger.error(
                "a bug in the %s handler: the state may miss this message", method, exc_info=error
            )
        return outcome

    def _guard(self, handler: Handler) -> Callable[..., Any]:
        router = self
        handled, wrong_shape, internal_error = Outcome  # locals: this runs per message

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                handler(*args, **kwargs)
            except WrongShape:
                router._outcome = wrong_shape
            except Exception as exc:
                router._outcome = internal_error
                router._error = exc
            else:
                router._outcome = handled
            return _SUCCESS

        # jsonrpcserver binds the params with inspect.signature() on every dispatch; the
        # handler's own signature, precomputed, is what inspect returns first, at no cost.
        guarded.__signature__ = inspect.signature(handler)  # type: ignore[attr-defined]
        guarded.__name__ = getattr(handler, "__name__", "handler")
        return guarded
