"""The Lua scripts of the experience stream, and the way a rollout worker runs its append.

``_ADD`` (one call per entry a worker appends) refuses the entry while the backlog is full, else appends it,
counts its bytes and raises the worker's produced total; either way it returns what the worker needs to know
about the run (see ``drl.memory.base.AppendReply``). ``_COMMIT`` (one call per trainer read) acknowledges and
deletes entries, releases their bytes, wakes held-back producers and records the trainer's state. ``_RAISE``
raises produced counts without ever lowering them. Their keys and arguments are in docs/wire-format.md.
"""

from __future__ import annotations

import redis

ADD = """
local v = redis.call('GET', KEYS[2]) or '-1'
local s = redis.call('EXISTS', KEYS[3])
local m = string.match(redis.call('HGET', KEYS[6], ARGV[7]) or '0', '^%d+') or '0'
redis.call('SET', KEYS[7], ARGV[8], 'NX')
local e = redis.call('GET', KEYS[7])
local size = string.len(ARGV[3]) + string.len(ARGV[4])
local b = tonumber(redis.call('GET', KEYS[5]) or '0')
local r = tonumber(redis.call('GET', KEYS[9]) or '1') or 1
local share = redis.call('HGET', KEYS[10], ARGV[5]) or ''
if redis.call('XLEN', KEYS[1]) >= r * tonumber(ARGV[1]) or (b > 0 and b + size > r * tonumber(ARGV[2])) then
  redis.call('DEL', KEYS[8])
  return {0, v, s, m, e, r, share}
end
redis.call('XADD', KEYS[1], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('INCRBY', KEYS[5], size)
if tonumber(ARGV[6]) > tonumber(redis.call('HGET', KEYS[4], ARGV[5]) or '0') then
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
end
return {1, v, s, m, e, r, share}
"""

COMMIT = """
local n = tonumber(ARGV[2])
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
  local left = tonumber(redis.call('GET', KEYS[2]) or '0') - freed
  if left > 0 then redis.call('SET', KEYS[2], left) else redis.call('DEL', KEYS[2]) end
  local kept = 64
  for i = 1, math.min(deleted, kept) do redis.call('RPUSH', KEYS[4], '1') end
  redis.call('LTRIM', KEYS[4], -kept, -1)
end
if 3 + 2 * n <= #ARGV then redis.call('HSET', KEYS[3], unpack(ARGV, 3 + 2 * n)) end
return freed
"""


RAISE = """
for i = 1, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 0
"""


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
        self._conn: redis.connection.AbstractConnection | None = None

    def __call__(self, keys: list, args: list):
        if self._conn is None:
            self._conn = self.client.connection_pool.make_connection()
        try:
            return self._run(keys, args)
        except redis.exceptions.NoScriptError:
            self._conn.send_command("SCRIPT", "LOAD", self.script)
            self._conn.read_response()
            return self._run(keys, args)

    def _run(self, keys: list, args: list):
        self._conn.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
        return self._conn.read_response()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None
