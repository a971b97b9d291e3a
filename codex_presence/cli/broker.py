"""``codex-presence broker``: the reference presence broker on uvicorn, loopback by default."""

from __future__ import annotations

import argparse
import ipaddress
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codex_presence.broker.history import HistoryRecorder
    from codex_presence.broker.metrics import BrokerMetrics
    from codex_presence.broker.notify.notifier import Notifier
    from codex_presence.broker.sign_ins import SignInStore
    from codex_presence.broker.state import Broker
    from codex_presence.broker.store import Store
    from codex_presence.broker.team import Team
    from codex_presence.broker.team_reload import TeamReloader
    from codex_presence.broker.web import WebRoster

HELP = "run the reference presence broker"

_EPILOG = """\
Without --team, a development team (one member: you) is made in
$XDG_STATE_HOME/codex-presence (or ~/.local/state/codex-presence) and the broker says
where your token is. The broker speaks plain HTTP: keep it on loopback, or put a TLS
proxy in front of it.

With --redis, the broker keeps the team's presence and browser sessions in Redis, so that
several brokers with the same team file show one roster and a restart loses nothing
(needs the redis extra: .venv/bin/pip install '.[redis]' in the clone). Put a Redis password in
CODEX_PRESENCE_REDIS rather than on the command line, which others can read.

With --notify URL (repeatable; apprise's URLs: json://, ntfys://, slack://, ...) or
[[notify]] entries in the team file, the broker tells operators of a member blocked for
--notify-after seconds (needs the notify extra: .venv/bin/pip install '.[notify]' in the clone; see
docs/notifications.md). A URL holds secrets: prefer the team file (mode 0600) or
CODEX_PRESENCE_NOTIFY (URLs separated by spaces) to the command line.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from codex_presence._wire import DEFAULT_PORT, DEFAULT_TTL, KEEPALIVE, MIN_TTL, SESSION_GRACE
    from codex_presence.broker.limits import BrokerLimits
    from codex_presence.core.notify_policy import DEFAULT_AFTER

    max_connections = BrokerLimits().max_connections

    parser.epilog = _EPILOG
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0: any)"
    )
    parser.add_argument(
        "--allowed-host",
        metavar="HOSTS",
        default="",
        help="comma-separated host names a request's Host header may name besides the bound "
        "address (a proxy's, e.g. presence.example.com; * for any). Default: on loopback, "
        "the loopback names only (a rebinding page gets 421); elsewhere, any",
    )
    parser.add_argument("--team", metavar="FILE", help="the team file (TOML)")
    parser.add_argument(
        "--history-hours",
        type=float,
        default=24.0,
        help="hours of each member's timeline kept for GET /history (default: 24; 0: none)",
    )
    parser.add_argument(
        "--activity-ttl",
        type=float,
        default=DEFAULT_TTL,
        metavar="SECONDS",
        help="how long a working/blocked report holds without a heartbeat; runners learn it "
        f"from GET /whoami and heartbeat at a third of it (default: {DEFAULT_TTL:g}, "
        f"at least {MIN_TTL:g})",
    )
    parser.add_argument(
        "--session-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a session's working/blocked state outlives the end of its runner's "
        "subscription (a runner that reconnects within it changes nothing; one that died "
        f"reads as idle after it) (default: {SESSION_GRACE:g}, or --activity-ttl if shorter)",
    )
    parser.add_argument(
        "--keepalive",
        type=float,
        default=KEEPALIVE,
        metavar="SECONDS",
        help=f"SSE keep-alive comment interval (default: {KEEPALIVE:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=max_connections,
        metavar="N",
        help="open connections, SSE streams included; past it a new connection is answered "
        f"503 and closed (default: {max_connections})",
    )
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="share state with other brokers through Redis at URL (redis://HOST:PORT/DB, "
        "rediss:// for TLS, unix:///PATH, or the Sentinels of a primary: "
        "redis+sentinel://HOST:PORT,HOST:PORT/SERVICE, rediss+sentinel:// for TLS); "
        "default: in memory, this broker alone",
    )
    parser.add_argument(
        "--redis-prefix",
        metavar="PREFIX",
        default="codex-presence",
        help="what every Redis key starts with, before the team name (default: "
        "codex-presence); deployments sharing one Redis and a team name need their own",
    )
    parser.add_argument(
        "--notify",
        metavar="URL",
        action="append",
        help="notify this target (an apprise URL) of a member blocked --notify-after seconds; "
        "repeatable",
    )
    parser.add_argument(
        "--notify-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long a member is blocked before --notify targets hear of it (default: "
        f"{DEFAULT_AFTER:g}; a [[notify]] entry has its own 'after')",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the roster page's address as operators reach it (behind a proxy, e.g. "
        "https://presence.example.com:8443): notifications link to it, and the page's sign-in "
        "accepts its origin",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--log-file", metavar="FILE", help="log here instead of stderr")


def is_loopback(host: str) -> bool:
    """True for a host that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """What to say when ``host`` lets other machines in (the broker has no TLS)."""
    if is_loopback(host):
        return None
    return (
        f"listening on {host}, reachable from other machines, over plain HTTP: tokens and "
        "presence travel unencrypted; put a TLS proxy in front"
    )


_SPARE_FILES = 64
"""Open files the broker needs besides its connections: the listening socket, logs, …"""


def _allow_open_files(connections: int, logger: logging.Logger) -> None:
    """Raise the soft open-file limit to fit ``connections`` (as far as the hard limit
    lets), so that the cap, not the system's accept() failing, is what refuses them."""
    import resource

    need = connections + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < need:
            logger.warning(
                "the open-file limit (%d) is below --max-connections + %d: connections "
                "past about %d fail to be accepted (raise `ulimit -n`)",
                hard,
                _SPARE_FILES,
                hard - _SPARE_FILES,
            )


def _shared_state(args: argparse.Namespace, team: Team) -> tuple[Store, SignInStore]:
    """The Redis store and session store of ``--redis``."""
    import sys
    from urllib.parse import urlsplit

    from codex_presence.cli.main import UsageError, install_hint

    try:
        from redis import RedisError

        from codex_presence.broker.redis.link import RedisLink, holds_secret
        from codex_presence.broker.redis.sentinel import SENTINEL_SCHEMES
        from codex_presence.broker.redis.sign_ins import RedisSignIns
        from codex_presence.broker.redis.store import RedisStore
        from codex_presence.broker.redis.team import team_marks
        from codex_presence.broker.redis.url_options import check_redis_url
    except ImportError:
        raise UsageError(f"--redis needs the redis extra: {install_hint('redis')}") from None
    url = args.redis
    try:
        parts = urlsplit(url)
        secret = holds_secret(url)
    except ValueError as exc:
        raise UsageError(f"--redis: not a URL: {exc}") from None
    if parts.scheme not in ("redis", "rediss", "unix", *SENTINEL_SCHEMES):
        raise UsageError(
            "--redis must be a redis://, rediss://, unix://, redis+sentinel:// or "
            "rediss+sentinel:// URL"
        )
    try:
        check_redis_url(url)  # an option that would keep the broker in outage for good
    except ValueError as exc:
        raise UsageError(f"--redis: {exc}") from None
    if not args.redis_prefix or set(args.redis_prefix) & set("{} \t\r\n"):
        raise UsageError("--redis-prefix must be non-empty, without braces or whitespace")
    if secret and any(a == "--redis" or a.startswith("--redis=") for a in sys.argv):
        logging.getLogger("codex_presence.broker").warning(
            "the --redis URL holds a password, which anyone on this machine can read in the "
            "command line; set CODEX_PRESENCE_REDIS instead"
        )
    try:
        link = RedisLink(url, team=team.name, prefix=args.redis_prefix)
    except (ValueError, RedisError) as exc:
        raise UsageError(f"--redis: {exc}") from None
    names = [m.name for m in team.members]
    store = RedisStore(link, names=names, ttl=args.activity_ttl, marks=team_marks(team))
    return store, RedisSignIns(link)


def _notifier(args: argparse.Namespace, team: Team, store: Store | None) -> Notifier | None:
    """The notifier of ``--notify`` and the team file's ``[[notify]]`` (None: no target)."""
    import math

    from codex_presence.broker.notify.config import command_line_targets, parse_notify
    from codex_presence.broker.team import TeamError
    from codex_presence.broker.team_file import read_team_file
    from codex_presence.cli.env import from_environment
    from codex_presence.cli.main import UsageError, install_hint
    from codex_presence.core.notify_policy import DEFAULT_AFTER

    urls = [url for given in args.notify or [] for url in given.split()]  # the variable: several
    if args.notify_after is None:
        args.notify_after = DEFAULT_AFTER
    elif not urls:  # before: accepted, and nothing said that it changed nothing
        raise UsageError(
            "--notify-after applies to --notify targets, and none is given (a [[notify]] "
            "entry of the team file has its own: after = SECONDS)"
        )
    if not (math.isfinite(args.notify_after) and args.notify_after >= 0):
        raise UsageError("--notify-after must be a number of seconds >= 0")
    notify_option = "CODEX_PRESENCE_NOTIFY" if from_environment(args.notify) else "--notify"
    targets = command_line_targets(urls, after=args.notify_after)
    if urls and notify_option == "--notify":
        logging.getLogger("codex_presence.broker").warning(
            "--notify URLs (and the secrets in them) show in the process list, to anyone on "
            "this machine; set CODEX_PRESENCE_NOTIFY or use the team file's [[notify]] instead"
        )
    given = len(targets)  # then the team file's, numbered from 0 as its errors say
    if args.team:
        try:
            targets += parse_notify(read_team_file(args.team), team, source=args.team)
        except TeamError as exc:
            raise UsageError(str(exc)) from None
        if len(targets) > given:
            _warn_if_others_can_read(args.team)
    link = args.public_url
    if link is not None:
        from codex_presence.client.auth import BadBrokerUrl, broker_url

        try:
            broker_url(link)  # http(s), a host, a port that is one
        except BadBrokerUrl as exc:
            raise UsageError(f"--public-url: {exc}") from None
    if not targets:
        return None
    try:
        from codex_presence.broker.notify.apprise_sender import AppriseSender
        from codex_presence.broker.notify.notifier import Notifier
    except ImportError:
        raise UsageError(
            f"notification targets need the notify extra: {install_hint('notify')}"
        ) from None
    claims = None
    if store is not None:
        from codex_presence.broker.notify.claims import RedisClaims
        from codex_presence.broker.redis.store import RedisStore

        if isinstance(store, RedisStore):
            claims = RedisClaims(store.link)
    sender = AppriseSender()
    for number, target in enumerate(targets):
        try:
            sender.masked(target.url)
        except ValueError as exc:  # never quotes the URL: it holds secrets
            where = target.name or (
                f"{notify_option} URL {number + 1}"
                if number < given
                else f"{args.team}: notify[{number - given}]"
            )
            raise UsageError(f"{where}: {exc}") from None
    notifier = Notifier(targets, team=team.name, sender=sender, claims=claims, link=link)
    logging.getLogger("codex_presence.notify").info(
        "notifying %s", ", ".join(t.label for t in notifier.targets)
    )
    return notifier


def _history_and_metrics(
    args: argparse.Namespace, team: Team, store: Store | None, notifier: Notifier | None
) -> tuple[BrokerMetrics, HistoryRecorder | None]:
    """The broker's metrics, and the history of ``--history-hours`` (None: kept off)."""
    from codex_presence.broker.history_http import history_recorder
    from codex_presence.broker.metrics import BrokerMetrics
    from codex_presence.cli.main import UsageError

    metrics = BrokerMetrics(notifier)
    link = getattr(store, "link", None)  # the shared store's
    if link is not None:
        metrics.watch(link)
    names = [m.name for m in team.members]
    try:
        history = history_recorder(link, names, args.history_hours, metrics.block_answered)
    except ValueError as exc:
        raise UsageError(f"--history-hours: {exc}") from None
    return metrics, history


def _warn_if_others_can_read(team_file: str) -> None:
    """The team file holds notification URLs (their secrets): say so if group or others
    can read it, as a token file's runner does."""
    import stat
    from pathlib import Path

    try:
        mode = Path(team_file).stat().st_mode
    except OSError:
        return  # it was just read: a file gone meanwhile is not this warning's business
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        logging.getLogger("codex_presence.notify").warning(
            "%s holds [[notify]] URLs (their secrets) and is readable by group or others;"
            " chmod 600 it",
            team_file,
        )


def _team_reloader(path: str, broker: Broker, web: WebRoster) -> TeamReloader:
    """Reads the team file again when it changes, or on SIGHUP, into the broker and page."""
    from codex_presence.broker.team_reload import TeamReloader

    def apply(team: Team) -> None:
        broker.replace_team(team)  # ValueError: a change it cannot follow, nothing applied
        web.team = team

    return TeamReloader(path, apply)


def run(args: argparse.Namespace) -> int:
    import socket
    import sys

    import uvicorn

    from codex_presence._wire import MIN_TTL, SESSION_GRACE, counted, printable
    from codex_presence.broker.config import BrokerConfig, ConfigError, build_broker
    from codex_presence.broker.hosts import allowed_hosts
    from codex_presence.broker.limits import BrokerLimits
    from codex_presence.broker.logs import route_server_logs
    from codex_presence.broker.server import BrokerServer, listen_socket, settle_gc
    from codex_presence.broker.team import TeamError
    from codex_presence.broker.team_file import dev_team, load_team
    from codex_presence.broker.web import WebRoster
    from codex_presence.cli.main import UsageError, setup_logging

    setup_logging(verbose=args.verbose, quiet=args.quiet, log_file=args.log_file)
    ours = logging.getLogger("codex_presence")
    route_server_logs(ours.handlers[0], level=ours.level)  # uvicorn's too, no flood
    logger = logging.getLogger("codex_presence.broker")
    if not args.activity_ttl >= MIN_TTL:
        raise UsageError(
            f"--activity-ttl must be at least {MIN_TTL:g} s (got {args.activity_ttl:g}): "
            "runners heartbeat at a third of it"
        )
    if args.session_grace is None:  # the default gives way to a shorter TTL
        args.session_grace = min(SESSION_GRACE, args.activity_ttl)
    if not 0 <= args.session_grace <= args.activity_ttl:
        raise UsageError(
            "--session-grace must be 0 or more, and at most --activity-ttl "
            f"(got {args.session_grace:g}; --activity-ttl is {args.activity_ttl:g})"
        )
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0..65535")
    try:
        config = BrokerConfig(
            activity_ttl=args.activity_ttl,
            keepalive=args.keepalive,
            session_grace=args.session_grace,
            limits=BrokerLimits(max_connections=args.max_connections),
        )
    except ConfigError as exc:
        raise UsageError(exc.spelled(lambda name: "--" + name.replace("_", "-"))) from None
    limits = config.limits
    _allow_open_files(args.max_connections, logger)
    try:
        if args.team:
            team = load_team(args.team)
        else:
            dev = dev_team()
            team = load_team(dev.team_path)
            logger.info(
                "no --team: development team %s (member %r); your token is in %s "
                "(export CODEX_PRESENCE_TOKEN_FILE=%s)",
                dev.team_path,
                dev.member,
                dev.token_path,
                dev.token_path,
            )
    except TeamError as exc:
        raise UsageError(str(exc)) from None

    store, sign_ins = _shared_state(args, team) if args.redis else (None, None)
    notifier = _notifier(args, team, store)
    web = WebRoster(  # the page at /, its sign-in
        team=team, limits=limits, sign_ins=sign_ins, public_url=args.public_url
    )
    metrics, history = _history_and_metrics(args, team, store, notifier)
    hosts = allowed_hosts(args.host, args.allowed_host.split(","))
    built = build_broker(
        team,
        config,
        store=store,
        web=web,
        notifier=notifier,
        allowed_hosts=hosts,
        history=history,
        metrics=metrics,
    )
    broker, app = built.broker, built.app
    if args.team:  # team add, remove and rotate, without a restart
        broker.companions.append(_team_reloader(args.team, broker, web).run)

    try:
        sock = listen_socket(args.host, args.port)
    except OSError as exc:
        sys.stderr.write(f"codex-presence broker: cannot bind {args.host}:{args.port}: {exc}\n")
        return 1
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"

    def announce() -> None:
        """Once listening (never before a bind that may fail): where, and what it exposes."""
        if broker.misconfigured is not None:
            return  # it stops at once, and says why
        warning = exposure_warning(args.host)
        if warning:
            logger.warning("%s", warning)
        sys.stderr.write(
            f"codex-presence broker: listening on {url} "
            f"(team {printable(team.name)}, {counted(len(team.members), 'member')})\n"
        )
        sys.stderr.flush()

    server_config = uvicorn.Config(
        app,
        log_config=None,
        log_level=logging.DEBUG if args.verbose > 1 else logging.WARNING,
        access_log=args.verbose > 1,
        timeout_graceful_shutdown=3,
        lifespan="on",
    )
    try:

        def started() -> None:
            settle_gc()
            announce()

        server = BrokerServer(server_config, broker=broker, limits=limits, on_started=started)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    if broker.misconfigured is not None:
        raise UsageError(broker.misconfigured)
    return 1 if broker.failed else 0  # a supervisor restarts it
