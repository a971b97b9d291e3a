"""Each notice sent once by the brokers sharing Redis: the notifier's claims there.

Every broker of a team runs the same policy over the same presence, so each one finds the
same notice due at about the same time, under the same key
(:attr:`~codex_presence.core.notify_policy.Notice.key`). Before sending, a broker claims
it: ``n:<key>`` (under the team's prefix) set with ``NX`` and an expiry (the *lease*),
holding the broker's id; the broker that set it sends. The others are told how long the
lease still runs, and ask again then, so that a broker that died mid-send (its lease
lapses) loses the notice for no one: the next to ask sends it. A claim no broker could
have made (without an expiry, or with one past the lease) is taken as free, and a
``done`` past the keep is cut to it: a key set by hand silences no target for good. A
broker asking again while its own lease runs renews it (before each retry). Once sent,
or given up, the key holds ``done`` for a long while: nobody sends that notice again, a
broker restarted since included.

One Lua script per claim (atomic: the check and the set cannot interleave with another
broker's), read as the brokers' own scripts read
(:data:`~codex_presence.broker.redis.scripts.TOLERANT`): a claim key of another type is
replaced, not a failure that would hold its notice back.
"""

from __future__ import annotations

from codex_presence.broker.notify.notifier import KEEP
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.scripts import TOLERANT

__all__ = ["RedisClaims"]

_CLAIM = (
    TOLERANT
    + """
local key = ARGV[1] .. 'n:' .. ARGV[2]
local held = on('GET', key)
local left = redis.call('PTTL', key)
if held == 'done' then
  if left < 0 or left > tonumber(ARGV[5]) then redis.call('PEXPIRE', key, ARGV[5]) end
  return -1
end
if held == false or held == ARGV[3] or left < 0 or left > tonumber(ARGV[4]) then
  redis.call('SET', key, ARGV[3], 'PX', ARGV[4])
  return -2
end
return left
"""
)
"""ARGV: the key, this broker's id, the lease (ms), the keep (ms). A claim no broker could
have set (no expiry, or one past the lease every broker takes) is taken as if free: one
set by hand silenced its target for good, the brokers asking again ~20 times a second; a
``done`` past the keep is cut to it."""

_SETTLE = """
redis.call('SET', ARGV[1] .. 'n:' .. ARGV[2], 'done', 'PX', ARGV[3])
return 1
"""


class RedisClaims:
    """The claims of one broker (``link``'s) on the team's notices."""

    def __init__(self, link: RedisLink, *, keep: float = KEEP) -> None:
        self._link = link
        self._keep_ms = max(1, round(keep * 1000))
        self._claim = link.script(_CLAIM)
        self._settle = link.script(_SETTLE)

    async def claim(self, key: str, lease: float) -> float | bool:
        if not self._link.up:
            raise ConnectionError("the shared store (Redis) is unreachable")
        lease_ms = max(1, round(lease * 1000))
        answer = int(
            await self._link.run_script(
                self._claim, [key, self._link.broker_id, lease_ms, self._keep_ms]
            )
        )
        if answer == -2:
            return True
        if answer == -1:
            return False
        return answer / 1000

    async def settle(self, key: str, keep: float) -> None:
        await self._link.run_script(self._settle, [key, max(1, round(keep * 1000))])
