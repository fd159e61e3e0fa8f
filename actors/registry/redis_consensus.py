"""The pool-size consensus store on a real Redis, as Numaflow uses it (`allocator.node.pool_size` has the rules).

Two sorted sets per pool: `<prefix>:heartbeats` (member -> time of its last heartbeat) and
`<prefix>:sizes` (member -> the pool size it last reported). Registering and syncing are each one Lua script,
so the heartbeat, the clean-up of stale members and the agree/disagree decision are atomic. With
`now_s=None` the script reads Redis's own clock (`TIME`), the one clock every member shares in a realtime
run; tests pass `now_s` to compare decisions with `MemoryConsensusStore` step by step.

A connection that fails or times out raises `StoreUnreachableError` after `timeout_s`: a caller on a timer never
hangs on it.
"""

from __future__ import annotations

import redis

from allocator.node.pool_size import Decision, StoreUnreachableError

# KEYS: heartbeats, sizes. ARGV: member, reported size ('' to report the number of members: a registration),
# now in seconds ('' for Redis's TIME), ttl in seconds. Returns {agreed 0/1, pool size, members}.
# Times are formatted with 17 significant digits, so a score holds exactly the double the caller computed.
_STEP = """
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[3])
end
redis.call('ZADD', KEYS[1], string.format('%.17g', now), ARGV[1])
local cutoff = now - tonumber(ARGV[4])
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.17g', cutoff))
for _, name in ipairs(stale) do
  redis.call('ZREM', KEYS[1], name)
  redis.call('ZREM', KEYS[2], name)
end
local members = redis.call('ZCARD', KEYS[1])
local reported = members
if ARGV[2] ~= '' then reported = tonumber(ARGV[2]) end
redis.call('ZADD', KEYS[2], reported, ARGV[1])
local low = tonumber(redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2])
local high = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
local agreed = 0
if low == high and high == members then agreed = 1 end
return {agreed, high, members}
"""


def ping(url: str, timeout_s: float = 2.0) -> None:
    """Raise `StoreUnreachableError` unless the Redis at `url` answers (a run checks it before it starts)."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as error:
        raise StoreUnreachableError(f"cannot reach {url}: {error}") from error
    finally:
        client.close()


class RedisConsensusStore:
    """`allocator.node.pool_size.ConsensusStore` on Redis at `url` (e.g. `redis://127.0.0.1:6379/0`)."""

    def __init__(self, url: str, prefix: str, ttl_s: float, timeout_s: float = 0.5) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self.url, self.prefix, self.ttl_s = url, prefix, ttl_s
        self._keys = [f"{prefix}:heartbeats", f"{prefix}:sizes"]
        self._client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False
        )
        self._step = self._client.register_script(_STEP)

    def __repr__(self) -> str:
        return f"RedisConsensusStore({self.url!r}, prefix={self.prefix!r}, ttl={self.ttl_s} s)"

    def register(self, member: str, now_s: float | None) -> int:
        return self._run(member, "", now_s).members

    def sync(self, member: str, reported_size: int, now_s: float | None) -> Decision:
        return self._run(member, str(int(reported_size)), now_s)

    def leave(self, member: str) -> None:
        try:
            with self._client.pipeline(transaction=True) as pipe:
                for key in self._keys:
                    pipe.zrem(key, member)
                pipe.execute()
        except redis.RedisError as error:
            raise StoreUnreachableError(f"{self.url}: {error}") from error

    def clear(self) -> None:
        """Delete this pool's keys (a run starts from an empty pool)."""
        try:
            self._client.delete(*self._keys)
        except redis.RedisError as error:
            raise StoreUnreachableError(f"{self.url}: {error}") from error

    def close(self) -> None:
        self._client.close()

    def _run(self, member: str, reported: str, now_s: float | None) -> Decision:
        now = "" if now_s is None else repr(float(now_s))
        try:
            args = [member, reported, now, repr(float(self.ttl_s))]
            agreed, pool_size, members = self._step(keys=self._keys, args=args)
        except redis.RedisError as error:
            raise StoreUnreachableError(f"{self.url}: {error}") from error
        return Decision(bool(agreed), int(pool_size), int(members))
