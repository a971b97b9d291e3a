"""apprise behind one adapter: checking a target URL, masking it, sending one notice.

apprise (PyPI ``apprise``, the ``notify`` extra) turns one URL per service into a client
for it; this module is the only one that imports it (an import-linter contract says so), and
only once a target is configured: importing it and loading its plugins takes longer than
the rest of the broker's start (docs/notifications.md has the figures).

Secrets. A target URL carries secrets, and apprise logs them: its plugins log the URL they
post to (a Slack webhook's tokens are its path) at debug level, and their failures at
warning level. None of that may reach our log at any verbosity, so apprise's logger (and
urllib3's, which names the paths it retries) stop at :class:`_Capture`: nothing propagates,
and the one line that says why a send failed is kept, with every piece of the URL that
apprise's own privacy rendering masks replaced by ``***`` (:func:`scrub`), for our log line.

apprise is blocking (requests): :meth:`AppriseSender.send` runs in a worker thread, with
apprise's own connect and read timeouts set to the notifier's, so a thread never outlives a
delivery by much. Its per-plugin throttle (a sleep between two sends of one plugin object)
never applies: each send builds its plugin afresh, and the notifier paces its retries.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any
from urllib.parse import unquote

import apprise

__all__ = ["AppriseSender", "scrub", "secret_parts"]

_KINDS = {
    "info": apprise.NotifyType.INFO,
    "success": apprise.NotifyType.SUCCESS,
    "failure": apprise.NotifyType.FAILURE,  # a session lost
}


def secret_parts(url: str, masked: str) -> list[str]:
    """The pieces of ``url`` (as written, and %-decoded) that ``masked`` (apprise's privacy
    rendering of it) does not show: its secrets, longest first."""
    pieces = {p for p in re.split(r"[/:@?&=#,+;\s]", url) if len(p) >= 3}
    pieces |= {unquote(p) for p in pieces}
    hidden = [p for p in pieces if p not in masked]
    return sorted(hidden, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class _Capture(logging.Handler):
    """Where apprise's (and urllib3's) log records end: the latest warning of the current
    thread's send is kept (scrubbed), everything else is dropped."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING or not hasattr(self.local, "secrets"):
            return
        try:
            text = record.getMessage()
        except Exception:  # a record apprise formats badly must not break the send
            return
        self.local.reason = scrub(text, self.local.secrets)[:300]


_capture = _Capture()


def _silence_library_logs() -> None:
    for name in ("apprise", "urllib3"):
        library = logging.getLogger(name)
        library.propagate = False
        if _capture not in library.handlers:
            library.addHandler(_capture)


_GENERIC_WEBHOOKS = frozenset({"json", "jsons", "form", "forms", "xml", "xmls"})
"""apprise's webhooks to any URL, whose path it shows as it is in a label."""


def _label(plugin: Any) -> str:
    """How a target is shown (see :meth:`AppriseSender.masked`)."""
    shown = str(plugin.url(privacy=True)).partition("?")[0]
    scheme, sep, rest = shown.partition("://")
    where, _, path = rest.partition("/")
    if scheme.lower() in _GENERIC_WEBHOOKS and path.strip("/"):
        return f"{scheme}{sep}{where}/***"
    return shown


class AppriseSender:
    """Checks, masks and sends to apprise URLs."""

    def __init__(self) -> None:
        _silence_library_logs()

    def _plugin(self, url: str) -> Any:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        if plugin is None:
            raise ValueError(
                "not a notification URL apprise knows (see apprise's list of services)"
            )
        return plugin

    def masked(self, url: str) -> str:
        """``url`` as apprise shows it with its secrets masked, without its query (apprise
        spells out every default there), and without the path of a generic webhook
        (``json://``, ``form://``, ``xml://``: apprise shows it as it is, and a webhook's
        path is often its secret, ``/hooks/<token>``); :class:`ValueError` (which never
        quotes the URL) when apprise does not know it."""
        return _label(self._plugin(url))

    def send(self, url: str, title: str, body: str, kind: str, timeout: float) -> str | None:
        """Send one notification (blocking); None when it was delivered, else why not
        (no secret in it). ``kind``: "info", "success", "warning" or "failure"."""
        try:
            plugin = self._plugin(url)
        except ValueError as exc:
            return str(exc)
        secrets = secret_parts(url, _label(plugin))
        plugin.socket_connect_timeout = timeout
        plugin.socket_read_timeout = timeout
        local = _capture.local
        local.secrets, local.reason = secrets, None
        try:
            ok = plugin.notify(
                body=body, title=title, notify_type=_KINDS.get(kind, apprise.NotifyType.WARNING)
            )
        except Exception as exc:  # a plugin's bug: a failed send, never a dead worker
            return scrub(f"{type(exc).__name__}: {exc}", secrets)[:300]
        finally:
            reason = local.reason
            del local.secrets
        if ok:
            return None
        return reason or "the service did not accept it"
