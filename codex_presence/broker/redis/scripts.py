"""The Lua scripts that change the team's state in Redis, and how they read what they find.

Every change of the shared state is one script (atomic: nothing is ever half-written);
:mod:`~codex_presence.broker.redis.store` (presence) and
:mod:`~codex_presence.broker.redis.sign_ins` (browser sessions) say what each key holds
and run them. They live here, apart from the Python that runs them, because one rule holds
for all of them: **a value the brokers cannot read costs the key it is in, never the
team.** Redis is shared, and anyone with write access (an operator by hand, another
version of the broker, a bug) can leave a hash where a string was meant, or ``abc`` in
the change counter. A script that raised on such a value failed every report, every
heartbeat and every resync that touched it: the whole team's brokers stayed in outage
for as long as the key stayed.

So every script starts with :data:`TOLERANT`, whose helpers read defensively:

``on(command, key, ...)``
    Runs a command on a key that may hold a value of another type (``WRONGTYPE``): the
    key is deleted, noted, and the command run again on the now empty key. Writers use
    it: the unreadable value is replaced by the write they were making.
``look(command, key, ...)``
    The same for a read that must not change anything (the snapshot): the key is noted
    and read as absent.
``int(value)``
    A stored count or time: a string of at most 15 digits (exact as a Lua number), or
    nil for anything else (``garbage``, ``1e9``, ``-1``).
``next_seq(ns)``
    ``INCR`` of the change counter; a counter that is not an integer (or not a string),
    one ``INCR`` cannot increment (``9223372036854775807``), or one past 14 digits (which
    cjson would round in the events) is deleted and starts again at 1, which every broker
    takes for the numbering having started again (it reads the state in full, as after
    ``DEL seq``).
``time(value)``, ``decoded(value)``
    A number from a decoded record that is a time a broker writes (else nil); a stored
    JSON object decoded (nil for anything else).

Each script returns what it found unreadable (``lost``: the keys' names) beside its
answer, and the broker says so in its log, once, naming the key (see
:meth:`~codex_presence.broker.redis.store.RedisStore.resync`). Only a wrong type and a
counter that is not a number are handled so: any other error (out of memory, an ACL) is
Redis refusing, and fails the script as before.
"""

from __future__ import annotations

__all__ = [
    "BINDINGS",
    "COUNTS",
    "IDLE_KEPT_MS",
    "LEAVE",
    "SNAPSHOT",
    "TEAM",
    "TOLERANT",
    "report_script",
]

TOLERANT = """
local lost = {}
local function failed(reply, what)
  return type(reply) == 'table' and reply.err ~= nil
    and string.find(reply.err, what, 1, true) ~= nil
end
local function on(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if failed(reply, 'WRONGTYPE') then
    redis.call('DEL', key)
    lost[#lost + 1] = key
  elseif not (type(reply) == 'table' and reply.err) then
    return reply
  end
  return redis.call(command, key, ...)
end
local function look(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if failed(reply, 'WRONGTYPE') then
    lost[#lost + 1] = key
    return false
  elseif type(reply) == 'table' and reply.err then
    return redis.call(command, key, ...)
  end
  return reply
end
local function int(value)
  if type(value) == 'string' and #value <= 15 and string.match(value, '^%d+$') then
    return tonumber(value)
  end
  return nil
end
local function next_seq(ns)
  local key = ns .. 'seq'
  local reply = redis.pcall('INCR', key)
  if failed(reply, 'WRONGTYPE') or failed(reply, 'not an integer')
    or failed(reply, 'overflow') or (type(reply) == 'number' and reply > 99999999999999) then
    redis.call('DEL', key)
    lost[#lost + 1] = key
    reply = redis.call('INCR', key)
  elseif type(reply) == 'table' and reply.err then
    return redis.call('INCR', key)
  end
  return reply
end
local function time(value)
  if type(value) == 'number' and value >= 0 and value <= 99999999999999
    and value == math.floor(value) then
    return value
  end
  return nil
end
local function decoded(value)
  if type(value) ~= 'string' then return nil end
  local ok, data = pcall(cjson.decode, value)
  if ok and type(data) == 'table' then return data end
  return nil
end
"""

# Each presence script: KEYS[1] is the team's channel, ARGV[1] the team's key prefix.
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
_META = """
local function meta(ns, name, created, seen)
  local key = ns .. 'm:' .. name
  local stored = on('HMGET', key, 'c', 's')
  local c, s = int(stored[1]), int(stored[2])
  if (stored[1] and not c) or (stored[2] and not s) then
    lost[#lost + 1] = key
    if stored[1] and not c then redis.call('HDEL', key, 'c') end
    if stored[2] and not s then redis.call('HDEL', key, 's') end
  end
  c, s = c or 0, s or 0
  if created > 0 and (c == 0 or created < c) then
    c = created
    redis.call('HSET', key, 'c', c)
  end
  if seen > s then
    s = seen
    redis.call('HSET', key, 's', s)
  end
  return c, s
end
"""
_OWN = """
local function own(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= kind then
    redis.call('DEL', key)
    lost[#lost + 1] = key
  end
end
"""
IDLE_KEPT_MS = 3_600_000
"""How long a session that ended idle keeps its record (its ``agent``) in Redis, for a later
report without ``agent`` to find it."""


def report_script(ttl_ms: int, most: int) -> str:
    """The script of a report of one session (the anonymous one is the session ``""``)
    for a broker whose TTL is ``ttl_ms`` and whose bound of busy sessions a member is
    ``most``. It replies ``[event, lost, seq]`` (the event's number apart: when its echo
    came first, the reply is not decoded), or nil when the report would make one session
    more busy than the bound.

    ARGV: the prefix, the name, the session, the state, the broker's time (ms), then,
    only when not 0 and kept, the background count and the agent (its JSON, ``null``
    included; ``""`` or none keeps the stored one). The broker's settings are in the
    script's text, not its arguments: each argument costs the broker ~1,500 instructions
    to pack at every report (issue 32), and a typical report now packs five, as the
    anonymous report of ``b9ae369`` did. Brokers with the same settings share a script.
    """
    if not (0 < ttl_ms < 2**31 and 0 <= most <= 1_000_000):  # what a broker is given
        raise ValueError(f"a report script for a TTL of {ttl_ms} ms and a bound of {most}")
    return (
        TOLERANT
        + _NOW
        + _OWN
        + _META
        + f"""
local ns, name, sid, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local px, at, most = {ttl_ms}, tonumber(ARGV[5]), {most}
local bg = tonumber(ARGV[6]) or 0
local key = ns .. 's:' .. sid .. ':' .. name
local index = ns .. 'S:' .. name
own(key, 'string')
own(index, 'zset')
local holds = state ~= 'idle' or bg > 0
local score = redis.call('ZSCORE', index, sid)
if holds and sid ~= '' and not (score and tonumber(score) > now) then
  if redis.call('ZCOUNT', index, '(' .. now, '+inf') >= most then return false end
end
local since, bgsince, agent = at, 0, cjson.null
if bg > 0 then bgsince = at end
local stored = redis.call('GET', key)
local previous = decoded(stored)
if stored and not previous then lost[#lost + 1] = key end
if previous then
  if previous['state'] == state then since = time(previous['since']) or at end
  if bg > 0 and (time(previous['background']) or 0) > 0 then
    bgsince = time(previous['backgroundSince']) or at
  end
  if type(previous['agent']) == 'table' then agent = previous['agent'] end
end
if ARGV[7] and ARGV[7] ~= '' then agent = cjson.decode(ARGV[7]) end
local record = {{state = state, since = since}}  -- what is 0 or null is left out
if bg > 0 then record['background'], record['backgroundSince'] = bg, bgsince end
if agent ~= cjson.null then record['agent'] = agent end
if holds then
  redis.call('SET', key, cjson.encode(record), 'PX', px)
  redis.call('ZADD', index, now + px, sid)
  if redis.call('PTTL', index) < px then redis.call('PEXPIRE', index, px) end
else
  redis.call('ZREM', index, sid)
  if agent ~= cjson.null then
    redis.call('SET', key, cjson.encode(record), 'PX', {IDLE_KEPT_MS})
  else
    redis.call('DEL', key)
  end
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local c, s = meta(ns, name, at, at)
local seq = next_seq(ns)
local event = cjson.encode({{seq = seq, kind = 's', name = name, session = sid, ttl = px,
  createdAt = c, lastSeen = s, record = record}})
redis.call('PUBLISH', KEYS[1], event)
return {{event, lost, seq}}
"""
    )


# ARGV: prefix, this broker, grace ms, then (op, a, b) triples: "b" name session (bound
# here), "r" name session (released here: shorten), "d" broker "" (dead: shorten all its
# sessions), "B" "" "" (forget every binding of this broker: the full set follows).
BINDINGS = (
    TOLERANT
    + _NOW
    + _OWN
    + """
local ns, me, grace = ARGV[1], ARGV[2], tonumber(ARGV[3])
local mine = ns .. 'h:' .. me
own(mine, 'hash')
local function shorten(name, sid)
  local key = ns .. 's:' .. sid .. ':' .. name
  local index = ns .. 'S:' .. name
  own(key, 'string')
  own(index, 'zset')
  if not redis.call('ZSCORE', index, sid) then return end
  local pttl = redis.call('PTTL', key)
  if pttl > grace then
    redis.call('PEXPIRE', key, grace)
    redis.call('ZADD', index, now + grace, sid)
    pttl = grace
  end
  if pttl <= 0 then return end
  local record = decoded(redis.call('GET', key))
  if not record then return end
  local m = {0, 0}
  if redis.call('TYPE', ns .. 'm:' .. name)['ok'] == 'hash' then
    m = redis.call('HMGET', ns .. 'm:' .. name, 'c', 's')
  end
  local seq = next_seq(ns)
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq = seq, kind = 's', name = name,
    session = sid, ttl = pttl, createdAt = int(m[1]) or 0, lastSeen = int(m[2]) or 0,
    record = record}))
end
for i = 4, #ARGV, 3 do
  local op, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if op == 'B' then
    redis.call('DEL', mine)
  elseif op == 'b' then
    redis.call('HSET', mine, b .. ':' .. a, '1')
  elseif op == 'r' then
    redis.call('HDEL', mine, b .. ':' .. a)
    shorten(a, b)
  elseif op == 'd' then
    local theirs = ns .. 'h:' .. a
    own(theirs, 'hash')
    for _, field in ipairs(redis.call('HKEYS', theirs)) do
      local colon = string.find(field, ':', 1, true)
      if colon then shorten(string.sub(field, colon + 1), string.sub(field, 1, colon - 1)) end
    end
    redis.call('DEL', theirs)
  end
end
return {1, lost}
"""
)
"""Bindings of subscriptions to sessions, and their releases: ``[1, lost]``."""
COUNTS = (
    TOLERANT
    + _NOW
    + _META
    + """
local ns, me, bound, full = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local brokers = ns .. 'brokers'
local mine = ns .. 'c:' .. me
local known = on('ZSCORE', brokers, me)
redis.call('ZADD', brokers, now, me)
if full then
  redis.call('DEL', mine)
end
local all = {}
for i = 5, #ARGV, 4 do
  local name, count = ARGV[i], tonumber(ARGV[i + 1])
  if count > 0 then
    on('HSET', mine, name, count)
  else
    on('HDEL', mine, name)
  end
  local c, s = meta(ns, name, tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
  if full then
    if count > 0 then
      all[name] = count
    end
  else
    local seq = next_seq(ns)
    redis.call('PUBLISH', KEYS[1], cjson.encode({seq = seq, kind = 'c', name = name,
      broker = me, count = count, createdAt = c, lastSeen = s}))
  end
end
if full then
  local seq = next_seq(ns)
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq = seq, kind = 'b', broker = me,
    counts = all}))
end
redis.call('PEXPIRE', mine, bound)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', brokers, '-inf', now - bound)) do
  if id ~= me then
    redis.call('DEL', ns .. 'c:' .. id)
    redis.call('ZREM', brokers, id)
    local seq = next_seq(ns)
    redis.call('PUBLISH', KEYS[1], cjson.encode({seq = seq, kind = 'g', broker = id}))
  end
end
return {known and 1 or 0, lost}
"""
)
"""A broker's heartbeat with its counts: ``[whether it was registered, lost]``."""
LEAVE = (
    TOLERANT
    + """
local ns, me = ARGV[1], ARGV[2]
redis.call('DEL', ns .. 'c:' .. me)
if on('ZREM', ns .. 'brokers', me) == 1 then
  local seq = next_seq(ns)
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq = seq, kind = 'g', broker = me}))
end
return {1, lost}
"""
)
"""A broker stopping cleanly: ``[1, lost]``."""
SNAPSHOT = (
    TOLERANT
    + """
local ns = ARGV[1]
local raw = look('GET', ns .. 'seq')
local seq = int(raw)
if raw and not seq then lost[#lost + 1] = ns .. 'seq' end
local brokers = {}
for _, id in ipairs(look('ZRANGE', ns .. 'brokers', 0, -1) or {}) do
  brokers[#brokers + 1] = id
  brokers[#brokers + 1] = look('HGETALL', ns .. 'c:' .. id) or {}
end
if ARGV[2] ~= '' then redis.call('PUBLISH', KEYS[1], ARGV[2]) end
local members = {}
for i = 3, #ARGV do
  local name = ARGV[i]
  local meta = look('HMGET', ns .. 'm:' .. name, 'c', 's') or {}
  local held = {}
  for _, sid in ipairs(look('ZRANGE', ns .. 'S:' .. name, 0, -1) or {}) do
    local key = ns .. 's:' .. sid .. ':' .. name
    local value = look('GET', key)
    if value then
      held[#held + 1] = sid
      held[#held + 1] = value
      held[#held + 1] = redis.call('PTTL', key)
    end
  end
  members[#members + 1] = {meta[1] or '0', meta[2] or '0', held}
end
return {seq or 0, brokers, members, lost}
"""
)
"""The state of the members named (``ARGV[3:]``), read-only: ``[seq, brokers, members,
lost]``, each member ``[createdAt, lastSeen, [session, record, pttl, ...]]``. ``ARGV[2]``, if
not empty, is published first: the marker that says where in the channel's order the
snapshot was read (a member added while the broker runs: see :mod:`~.store`)."""
TEAM = (
    TOLERANT
    + """
local key = ARGV[1] .. 'team'
local stored = on('HGETALL', key)
local theirs, there = {}, 0
for i = 1, #stored, 2 do
  theirs[stored[i]] = stored[i + 1]
  there = there + 1
end
local common = 0
for i = 3, #ARGV, 2 do
  if theirs[ARGV[i]] == ARGV[i + 1] then common = common + 1 end
end
local here = (#ARGV - 2) / 2
if there > 0 and common == 0 and ARGV[2] ~= '1' then
  return {0, here, there, lost}
end
if common ~= there or common ~= here then
  redis.call('DEL', key)
  for i = 3, #ARGV, 2 do
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  end
end
return {common, here - common, there - common, lost}
"""
)
"""The team file's marks (``name -> mark`` pairs from ``ARGV[3]``): ``[in common, only here,
only in Redis, lost]``. Written unless none is in common with what Redis holds (another
deployment's), or anyway when ``ARGV[2]`` is ``1`` (a broker already sharing the keys
follows its team file's change)."""
