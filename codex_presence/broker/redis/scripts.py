"""The Lua scripts that change the team's state in Redis, and how they read what they find.

Every change of the shared state is one script (atomic: nothing is ever half-written);
:mod:`~codex_presence.broker.redis.store` (presence) and
:mod:`~codex_presence.broker.redis.sessions` (browser sessions) say what each key holds
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
    ``INCR`` of the change counter; a counter that is not an integer (or not a string)
    is deleted and starts again at 1, which every broker takes for the numbering having
    started again (it reads the state in full, as after ``DEL seq``).

Each script returns what it found unreadable (``lost``: the keys' names) beside its
answer, and the broker says so in its log, once, naming the key (see
:meth:`~codex_presence.broker.redis.store.RedisStore.resync`). Only a wrong type and a
counter that is not a number are handled so: any other error (out of memory, an ACL) is
Redis refusing, and fails the script as before.
"""

from __future__ import annotations

__all__ = ["COUNTS", "LEAVE", "REPORT", "SNAPSHOT", "TEAM", "TOLERANT"]

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
  if failed(reply, 'WRONGTYPE') or failed(reply, 'not an integer') then
    redis.call('DEL', key)
    lost[#lost + 1] = key
    reply = redis.call('INCR', key)
  elseif type(reply) == 'table' and reply.err then
    return redis.call('INCR', key)
  end
  return reply
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
REPORT = (
    TOLERANT
    + _META
    + """
local ns, name, state, px, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local key = ns .. 'a:' .. name
local since = now
local previous = on('GET', key)
if previous then
  local space = string.find(previous, ' ', 1, true)
  if space and string.sub(previous, 1, space - 1) == state then
    since = int(string.sub(previous, space + 1)) or now
  end
end
if state == 'idle' then
  redis.call('DEL', key)
else
  redis.call('SET', key, state .. ' ' .. string.format('%d', since), 'PX', px)
end
local c, s = meta(ns, name, now, now)
local seq = next_seq(ns)
local event = cjson.encode({seq, 'a', name, state, tonumber(px), since, c, s})
redis.call('PUBLISH', KEYS[1], event)
return {event, lost}
"""
)
"""A report: ``[event, lost]``."""
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
      all[#all + 1] = name
      all[#all + 1] = count
    end
  else
    local seq = next_seq(ns)
    redis.call('PUBLISH', KEYS[1], cjson.encode({seq, 'c', name, me, count, c, s}))
  end
end
if full then
  local seq = next_seq(ns)
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq, 'b', me, all}))
end
redis.call('PEXPIRE', mine, bound)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', brokers, '-inf', now - bound)) do
  if id ~= me then
    redis.call('DEL', ns .. 'c:' .. id)
    redis.call('ZREM', brokers, id)
    local seq = next_seq(ns)
    redis.call('PUBLISH', KEYS[1], cjson.encode({seq, 'g', id}))
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
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq, 'g', me}))
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
local members = {}
for i = 2, #ARGV do
  local key = ns .. 'a:' .. ARGV[i]
  local activity = look('GET', key)
  local meta = look('HMGET', ns .. 'm:' .. ARGV[i], 'c', 's') or {}
  members[#members + 1] = activity or ''
  members[#members + 1] = activity and redis.call('PTTL', key) or -2
  members[#members + 1] = meta[1] or '0'
  members[#members + 1] = meta[2] or '0'
end
return {seq or 0, brokers, members, lost}
"""
)
"""The whole state, read-only: ``[seq, brokers, members, lost]``."""
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
for i = 2, #ARGV, 2 do
  if theirs[ARGV[i]] == ARGV[i + 1] then common = common + 1 end
end
local here = (#ARGV - 1) / 2
if there > 0 and common == 0 then
  return {0, here, there, lost}
end
if common ~= there or common ~= here then
  redis.call('DEL', key)
  for i = 2, #ARGV, 2 do
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  end
end
return {common, here - common, there - common, lost}
"""
)
"""The team file's marks (``name -> mark`` pairs): ``[in common, only here, only in Redis,
lost]``. Written unless none is in common with what Redis holds (another deployment's)."""
