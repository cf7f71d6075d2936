"""The Lua scripts of the run's shared state, and the way a rollout worker runs its append.

``ADD`` (one call per entry a worker appends) refuses the entry while the backlog is full, else appends it,
counts its bytes and raises the worker's produced total; either way it returns what the worker needs to know
about the run (see ``drl.memory.base.AppendReply``). ``COMMIT`` (one call per trainer read) dead-letters,
acknowledges and deletes entries, releases their bytes, wakes held-back producers and records the trainer's state.
``RAISE`` raises produced counts without ever lowering them; ``DONE`` writes a worker's done marker with its
produced count; ``REGISTER`` writes membership, shares, forgotten done markers and the start time together;
``REPAIR`` repairs one unsound key. Each checks every key it writes or relies on before it writes anything
(``CHECKS``). Their keys and arguments are in docs/wire-format.md and below.
"""

from __future__ import annotations

import redis

CHECKS = """
local function bad(key, why) return redis.error_reply('UNSOUNDKEY ' .. key .. ' ' .. why) end
local function badarg(why) return redis.error_reply('BADARG ' .. why) end
local function count(s)
  if type(s) ~= 'string' or string.len(s) > 15 or not string.match(s, '^%d+$') then return nil end
  return tonumber(s)
end
local function seqs(s)
  if type(s) ~= 'string' or s == '' then return false end
  for part in string.gmatch(s .. ',', '([^,]*),') do
    if not count(part) then return false end
  end
  return true
end
local function read_field(name)
  local kind = string.match(name, '^(%a+):') or name
  return kind == 'seq' or kind == 'produced' or kind == 'end' or kind == 'final' or kind == 'consumed'
    or kind == 'duplicates' or kind == 'stale' or kind == 'dead_letters' or kind == 'updates' or kind == 'lost'
    or kind == 'totals'
end
local function totals(s)
  if type(s) ~= 'string' then return false end
  local first, rest = string.match(s, '^([^,]*)(.*)$')
  if not count(first) then return false end
  for part in string.gmatch(rest, ',([^,]*)') do
    local a, b, c = string.match(part, '^(%d+):(%d+):(%d+)$')
    if not (count(a) and count(b) and count(c)) then return false end
  end
  return true
end
local function sound_field(name, value)
  if not read_field(name) then return true end
  if string.match(name, '^totals:') then return totals(value) end
  return seqs(value)
end
local function floor(s)
  local a, b = string.match(type(s) == 'string' and s or '', '^(%d+),(%d+)$')
  return count(a) ~= nil and count(b) ~= nil
end
local function typed(key, want)
  local t = redis.call('TYPE', key)['ok']
  return t == 'none' or t == want
end
local function fence(key, who, epoch)
  if epoch == nil or epoch == '' then return nil, false end
  if who == nil or who == '' or not count(epoch) then return badarg('identity or epoch'), false end
  local held = redis.pcall('HGET', key, who)
  if type(held) == 'table' and held.err then return bad(key, 'is not a hash'), false end
  if held and not count(held) then return bad(key, 'field ' .. who .. ' is not a count'), false end
  if held and tonumber(held) > tonumber(epoch) then
    return redis.error_reply('FENCED ' .. who .. ' holds epoch ' .. held .. ', this writer ' .. epoch), false
  end
  return nil, not held or tonumber(held) < tonumber(epoch)
end
"""
"""The checks every script starts with. ``count`` accepts a decimal integer of at most 15 digits (below 10^15,
so exact in Lua's doubles and in JSON), ``seqs`` counts joined by commas and ``totals`` a count followed by ``,seq:count:total`` triples (the fields of
``trainer:state`` that drl reads back, ``read_field``, checked by ``sound_field``: counters and per-worker
progress), ``floor`` a writer's ``seq,total``; ``typed`` accepts a key of the type wanted or an absent one. ``fence``
refuses a write of identity ``who`` carrying a fencing epoch lower than the one the lease hash holds for it
(``FENCED ...``; an empty epoch is an unfenced write) with one read of the lease, and says whether the writer's
epoch is to be written there (absent or lower: a lease lost with the server's data is taken again by the first
write that carries an epoch), which the script does once every other check passed. A key that
fails is reported as ``UNSOUNDKEY <key> <why>`` before the script writes anything (a script that fails half-way
keeps what it wrote), and the caller repairs that key (``drl.memory.redis.repair``) and calls again; a bad
argument is ``BADARG``."""

ADD = (
    CHECKS
    + """
if not typed(KEYS[1], 'stream') then return bad(KEYS[1], 'is not a stream') end
if not typed(KEYS[4], 'hash') then return bad(KEYS[4], 'is not a hash') end
if not typed(KEYS[5], 'string') then return bad(KEYS[5], 'is not a string') end
if not typed(KEYS[7], 'string') then return bad(KEYS[7], 'is not a string') end
if not typed(KEYS[8], 'list') then return bad(KEYS[8], 'is not a list') end
if not typed(KEYS[9], 'string') then return bad(KEYS[9], 'is not a string') end
local b = count(redis.call('GET', KEYS[5]) or '0')
if not b then return bad(KEYS[5], 'is not a count') end
local r = count(redis.call('GET', KEYS[9]) or '1')
if not r or r < 1 or r > 1024 then return bad(KEYS[9], 'is not a factor in 1..1024') end
local had = count(redis.call('HGET', KEYS[4], ARGV[5]) or '0')
if not had then return bad(KEYS[4], 'field ' .. ARGV[5] .. ' is not a count') end
local max_entries, max_bytes, total = count(ARGV[1]), count(ARGV[2]), count(ARGV[6])
if not (max_entries and max_bytes and total) or ARGV[5] == '' or ARGV[8] == '' then
  return badarg('limits, worker, produced total or token')
end
local fenced, take = fence(KEYS[11], ARGV[5], ARGV[9])
if fenced then return fenced end
if take then redis.call('HSET', KEYS[11], ARGV[5], ARGV[9]) end
local v = '-1'
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then v = redis.call('GET', KEYS[2]) end
local s = redis.call('EXISTS', KEYS[3])
local m = '0'
if redis.call('TYPE', KEYS[6])['ok'] == 'hash' then
  m = string.match(redis.call('HGET', KEYS[6], ARGV[7]) or '0', '^%d+') or '0'
end
local share = ''
if redis.call('TYPE', KEYS[10])['ok'] == 'hash' then share = redis.call('HGET', KEYS[10], ARGV[5]) or '' end
redis.call('SET', KEYS[7], ARGV[8], 'NX')
local e = redis.call('GET', KEYS[7])
local size = string.len(ARGV[3]) + string.len(ARGV[4])
if redis.call('XLEN', KEYS[1]) >= r * max_entries or (b > 0 and b + size > r * max_bytes) then
  redis.call('DEL', KEYS[8])
  return {0, v, s, m, e, r, share}
end
redis.call('XADD', KEYS[1], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('INCRBY', KEYS[5], size)
if total > had then redis.call('HSET', KEYS[4], ARGV[5], ARGV[6]) end
return {1, v, s, m, e, r, share}
"""
)

COMMIT = (
    CHECKS
    + """
local who, epoch = ARGV[1], ARGV[2]
table.remove(ARGV, 1)
table.remove(ARGV, 1)
local fenced, take = fence(KEYS[7], who, epoch)
if fenced then return fenced end
if not typed(KEYS[1], 'stream') then return bad(KEYS[1], 'is not a stream') end
local group = redis.pcall('XPENDING', KEYS[1], ARGV[1])
if type(group) == 'table' and group.err then
  if string.find(group.err, 'NOGROUP', 1, true) then
    return redis.error_reply('NOGROUP consumer group ' .. ARGV[1] .. ' is gone: the server lost its data')
  end
  return group
end
if not typed(KEYS[2], 'string') then return bad(KEYS[2], 'is not a string') end
if not typed(KEYS[3], 'hash') then return bad(KEYS[3], 'is not a hash') end
if not typed(KEYS[4], 'list') then return bad(KEYS[4], 'is not a list') end
if not typed(KEYS[5], 'stream') then return bad(KEYS[5], 'is not a stream') end
if not typed(KEYS[6], 'hash') then return bad(KEYS[6], 'is not a hash') end
local bytes = count(redis.call('GET', KEYS[2]) or '0')
if not bytes then return bad(KEYS[2], 'is not a count') end
local state = redis.call('HGETALL', KEYS[3])
for i = 2, #state, 2 do
  if not sound_field(state[i - 1], state[i]) then
    return bad(KEYS[3], 'field ' .. state[i - 1] .. ' is not a count, watermark or totals')
  end
end
local n = count(ARGV[2])
if not n or 2 + 2 * n + 1 > #ARGV then return badarg('acknowledgement count') end
for i = 0, n - 1 do
  if not count(ARGV[4 + 2 * i]) then return badarg('entry size') end
end
local dead = {}
local at = 3 + 2 * n
local d = count(ARGV[at])
if not d then return badarg('dead-letter count') end
at = at + 1
for i = 1, d do
  local k = count(ARGV[at + 1])
  if not k or at + 1 + 2 * k > #ARGV then return badarg('dead letter') end
  if not count(redis.call('HGET', KEYS[6], ARGV[at]) or '0') then
    return bad(KEYS[6], 'field ' .. ARGV[at] .. ' is not a count')
  end
  dead[i] = {at, k}
  at = at + 2 + 2 * k
end
if (#ARGV - at + 1) % 2 ~= 0 then return badarg('state fields') end
if take then redis.call('HSET', KEYS[7], who, epoch) end
for _, entry in ipairs(dead) do
  local first, k = entry[1], entry[2]
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', '10000', '*', unpack(ARGV, first + 2, first + 1 + 2 * k))
  redis.call('HINCRBY', KEYS[6], ARGV[first], 1)
end
local freed = 0
local deleted = 0
for i = 0, n - 1 do
  local id = ARGV[3 + 2 * i]
  redis.call('XACK', KEYS[1], ARGV[1], id)
  if redis.call('XDEL', KEYS[1], id) == 1 then
    freed = freed + tonumber(ARGV[4 + 2 * i])
    deleted = deleted + 1
  end
end
if freed > 0 then
  local left = bytes - freed
  if left > 0 then redis.call('SET', KEYS[2], left) else redis.call('DEL', KEYS[2]) end
  local kept = 64
  for i = 1, math.min(deleted, kept) do redis.call('RPUSH', KEYS[4], '1') end
  redis.call('LTRIM', KEYS[4], -kept, -1)
end
if at <= #ARGV then redis.call('HSET', KEYS[3], unpack(ARGV, at)) end
return freed
"""
)


RAISE = (
    CHECKS
    + """
if not typed(KEYS[1], 'hash') then return bad(KEYS[1], 'is not a hash') end
if #ARGV % 2 ~= 0 then return badarg('worker and count pairs') end
for i = 1, #ARGV, 2 do
  if not count(ARGV[i + 1]) then return badarg('count') end
  if not count(redis.call('HGET', KEYS[1], ARGV[i]) or '0') then
    return bad(KEYS[1], 'field ' .. ARGV[i] .. ' is not a count')
  end
end
for i = 1, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 0
"""
)

DONE = (
    CHECKS
    + """
if not typed(KEYS[1], 'hash') then return bad(KEYS[1], 'is not a hash') end
if not typed(KEYS[2], 'hash') then return bad(KEYS[2], 'is not a hash') end
local total = count(ARGV[2])
if ARGV[1] == '' or not total then return badarg('worker or produced total') end
local had = count(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if not had then return bad(KEYS[2], 'field ' .. ARGV[1] .. ' is not a count') end
local fenced, take = fence(KEYS[3], ARGV[1], ARGV[3])
if fenced then return fenced end
if take then redis.call('HSET', KEYS[3], ARGV[1], ARGV[3]) end
if total > had then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 0
"""
)
"""A worker's done marker (``workers:done``) together with its produced count (``produced``, raised only), so that
a count lost to a repair is back once the worker ends; fenced by the worker's epoch (ARGV[3], KEYS[3] the run's
``leases``)."""

STATUS = (
    CHECKS
    + """
if not typed(KEYS[1], 'hash') then return bad(KEYS[1], 'is not a hash') end
if #ARGV < 4 or #ARGV % 2 ~= 0 then return badarg('identity, epoch and field pairs') end
local fenced, take = fence(KEYS[2], ARGV[1], ARGV[2])
if fenced then return fenced end
if take then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
return 0
"""
)
"""A service's status fields (KEYS[1] ``status:<name>``) written as its identity ARGV[1] with its epoch ARGV[2]
(KEYS[2] the run's ``leases``), then the field and value pairs."""

NEW_EPOCH = (
    CHECKS
    + """
if not typed(KEYS[1], 'hash') then return bad(KEYS[1], 'is not a hash') end
if ARGV[1] == nil or ARGV[1] == '' then return badarg('identity') end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and not count(held) then return bad(KEYS[1], 'field ' .. ARGV[1] .. ' is not a count') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = math.max(tonumber(held or '0') + 1, now)
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', epoch))
return epoch
"""
)
"""A new fencing epoch for identity ARGV[1] in KEYS[1] (the run's ``leases`` on the first server): above the one
held, and at least the server's clock in milliseconds, so that an identity taken again after the server lost its
data (and with it every epoch it held) still gets an epoch above that of any process that took it before."""

TAKE = (
    CHECKS
    + """
local fenced, take = fence(KEYS[1], ARGV[1], ARGV[2])
if fenced then return fenced end
if take then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0
"""
)
"""Raises identity ARGV[1]'s lease in KEYS[1] (a shard's ``leases``) to the epoch ARGV[2] it took on the run's
first server, before the writer or reader of that shard reads anything; refused (``FENCED``) when a newer process
took the identity already."""

REGISTER = (
    CHECKS
    + """
if not typed(KEYS[1], 'hash') then return bad(KEYS[1], 'is not a hash') end
if not typed(KEYS[2], 'hash') then return bad(KEYS[2], 'is not a hash') end
if not typed(KEYS[3], 'string') then return bad(KEYS[3], 'is not a string') end
if not typed(KEYS[4], 'hash') then return bad(KEYS[4], 'is not a hash') end
local members, shares, forget = count(ARGV[2]), count(ARGV[3]), count(ARGV[4])
if not (members and shares and forget) then return badarg('counts') end
local first_share = 5 + 2 * members
local first_forget = first_share + 2 * shares
local last = first_forget + forget - 1
if last > #ARGV or #ARGV > last + 1 then return badarg('counts') end
for i = 5, first_share - 1, 2 do
  if ARGV[i + 1] ~= 'active' and ARGV[i + 1] ~= 'retired' then return badarg('member state') end
end
for i = first_share, first_forget - 1, 2 do
  if not count(ARGV[i + 1]) then return badarg('share') end
end
local command = ARGV[1] == '1' and 'HSETNX' or 'HSET'
for i = 5, first_share - 1, 2 do redis.call(command, KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = first_share, first_forget - 1, 2 do redis.call(command, KEYS[2], ARGV[i], ARGV[i + 1]) end
for i = first_forget, last do redis.call('HDEL', KEYS[4], ARGV[i]) end
if #ARGV > last then redis.call('SET', KEYS[3], ARGV[#ARGV]) end
return 0
"""
)
"""Members, shares, forgotten done markers and the start time in one step, so that a restored server or a scaling
step is never seen half done: KEYS ``workers:members``, ``workers:shares``, ``started_at``, ``workers:done``;
ARGV ``only_new`` (1/0), the numbers of members, shares and forgotten workers, their pairs and names, then an
optional start time."""

REPAIR = (
    CHECKS
    + """
local key, want, rule = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TYPE', key)['ok']
if t ~= 'none' and t ~= want then
  redis.call('DEL', key)
  for i = 2, 1 + (tonumber(ARGV[3]) or 0) do redis.call('DEL', KEYS[i]) end
  return 'deleted'
end
if t == 'none' then return 'sound' end
local function sound(value)
  if rule == 'count' then return count(value) ~= nil end
  if rule == 'factor' then local f = count(value) return f ~= nil and f >= 1 and f <= 1024 end
  if rule == 'floor' then return floor(value) end
  return true
end
if rule == 'bytes' then
  local total = 0
  if redis.call('TYPE', KEYS[2])['ok'] == 'stream' then
    for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
      local fields = entry[2]
      for i = 1, #fields, 2 do
        if fields[i] == 'h' or fields[i] == 'd' then total = total + string.len(fields[i + 1]) end
      end
    end
  end
  if count(redis.call('GET', key)) == total then return 'sound' end
  if total > 0 then redis.call('SET', key, total) else redis.call('DEL', key) end
  return 'recounted'
end
if t == 'string' then
  if sound(redis.call('GET', key)) then return 'sound' end
  redis.call('DEL', key)
  return 'deleted'
end
if t == 'hash' then
  local dropped = 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local ok
    if rule == 'state' then ok = sound_field(all[i], all[i + 1]) else ok = sound(all[i + 1]) end
    if not ok then redis.call('HDEL', key, all[i]) dropped = dropped + 1 end
  end
  if dropped > 0 then return 'dropped fields' end
end
return 'sound'
"""
)
"""Repairs one key of a run (KEYS[1]; ARGV: the type it must have; what its values must be: ``count``,
``factor``, ``state`` (``sound_field``), ``floor``, ``bytes`` (recounted from the stream, KEYS[2]) or empty; how many of KEYS[2...] go with it),
re-checking it first, so that a repair raced by another process's repair or by a sound write changes nothing.
A key of the wrong type is deleted together with the keys that only make sense with it (the stream takes its
byte count and the data epoch along, so writers re-send what the trainer had not taken); a string with an
unsound value is deleted; a hash loses its unsound fields; a byte count is recounted."""


class DirectScript:
    """A Lua script run on a connection of its own, outside the client's pool and command layers: for the one
    call a rollout worker makes per entry, those layers (pool checkout and release, retries, event hooks, the
    script wrapper) cost about as much CPU as the round trip itself (bench/README.md, "Measurements behind the
    code"). The connection comes from the client's pool
    settings (credentials, TLS, timeouts, health checks); a connection error closes it (the next call connects
    again, so ``retrying`` covers it), and a server that lost its scripts (restarted) gets this one loaded again."""

    def __init__(self, client: redis.Redis, script: str):
        self.client = client
        self.script = script
        self.sha = client.register_script(script).sha
        self._conn: redis.connection.ConnectionInterface | None = None

    def __call__(self, keys: list, args: list):
        conn = self._conn
        if conn is None:
            conn = self._conn = self.client.connection_pool.make_connection()
        try:
            return self._run(conn, keys, args)
        except redis.exceptions.NoScriptError:
            conn.send_command("SCRIPT", "LOAD", self.script)
            conn.read_response()
            return self._run(conn, keys, args)

    def _run(self, conn: redis.connection.ConnectionInterface, keys: list, args: list):
        conn.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
        return conn.read_response()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None


CLAIM = (
    CHECKS
    + """
if not typed(KEYS[1], 'string') then return bad(KEYS[1], 'is not a string') end
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] and redis.call('PTTL', KEYS[1]) >= 0 then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
)
"""Takes or extends a claim (KEYS[1]) for a holder (ARGV[1]) for ARGV[2] ms; returns the other holder that has it.
drl always writes a claim with an expiry, so one without (written by something else) is taken over rather than
waited on for ever."""

RELEASE = (
    CHECKS
    + """
if not typed(KEYS[1], 'string') then return bad(KEYS[1], 'is not a string') end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
)
"""Gives a claim (KEYS[1]) up if its holder is ARGV[1]."""
