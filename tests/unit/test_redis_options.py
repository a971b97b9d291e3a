"""What a ``--redis`` URL may not hold, and an outage's reason in one line."""

from __future__ import annotations

import pytest

from codex_presence.broker.redis.link import REASON_MAX, outage_reason
from codex_presence.broker.redis.url_options import check_redis_url


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:6379/0",
        "redis://h/15?socket_timeout=0.5&health_check_interval=0&client_name=cp-1",
        "rediss://h/0?ssl_cert_reqs=required&decode_responses=false",
        "redis+sentinel://h:26379/mymaster/3?db=3",
        "unix:///run/redis.sock?db=2",
    ],
)
def test_options_a_broker_can_connect_with_pass(url: str) -> None:
    check_redis_url(url)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://h/0?socket_timeout=0", "socket_timeout=0: must be seconds > 0"),
        ("redis://h/0?socket_connect_timeout=nan", "socket_connect_timeout=nan: must be"),
        ("redis://h/0?timeout=x", "timeout=x: must be a number of seconds"),
        ("redis://h/0?decode_responses=True", "decode_responses=True: the broker reads"),
        ("redis://h/0?client_name=a+b", "client_name=a b: Redis takes a name"),
        ("redis://h/0?client_name=", "client_name=: Redis takes a name"),
        ("redis://h/0?db=99", "db=99: Redis has databases 0 to 15"),
        ("redis://h/16", "database 16: Redis has databases 0 to 15"),
        ("redis://h/0?health_check_interval=-5", "health_check_interval=-5: must be a whole"),
        ("redis://h/0?max_connections=0", "max_connections=0: must be a number > 0"),
        ("rediss://h/0?ssl_cert_reqs=bogus", "ssl_cert_reqs=bogus: must be one of none"),
        ("rediss+sentinel://h/svc/20", "database 20: Redis has databases 0 to 15"),
    ],
)
def test_an_option_that_keeps_a_broker_in_outage_is_named(url: str, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_redis_url(url)
    assert str(caught.value).startswith(said)


def test_an_outage_reason_is_one_short_line() -> None:
    """``/healthz`` showed a ~1.5 KB object dump as the reason redis was down."""
    dump = "Error connecting: <Connection(" + "x=1, " * 300 + ")>\nTraceback: ..."
    reason = outage_reason(RuntimeError(dump))
    assert "\n" not in reason and len(reason) <= REASON_MAX
    assert reason.startswith("Error connecting: <Connection(")
    assert outage_reason(TimeoutError()) == "TimeoutError"
