"""Where the state of `vtx serve`'s limits lives (`--req-limit-storage`): each client's token
bucket, its recent refusals and its ban. In this process (`MemoryStore`, the default), or in
Redis (`RedisStore`, `redis://HOST:PORT/DB`, as LibreTranslate's `--req-limit-storage`), so that
several `vtx serve` processes behind one proxy share them.

A client is a name such as "address 10.0.0.1" or "key KEY". Both stores keep the same rules:
a bucket of `size` tokens refills at size / 60 a second; refusals count within a window that
starts at the first one; a ban lasts its seconds. Every table stays bounded: in memory at
MAX_CLIENTS entries, in Redis by each entry's expiry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from typing import Callable, Protocol

from vtx.errors import DataError
from vtx.serve.requests import RequestError

MAX_CLIENTS = 100_000  # entries a table of MemoryStore keeps at most; stale ones dropped first


class LimitStore(Protocol):
    def take(self, client: str, cost: int, size: int) -> float:
        """Take `cost` tokens from `client`'s bucket of `size`: 0 if taken, else the seconds
        until it holds them (nothing taken)."""

    def refused(self, client: str, threshold: int, window_s: float, ban_s: float) -> None:
        """Count a refusal of `client`; its refusal past `threshold` in `window_s` bans it
        for `ban_s` seconds."""

    def banned_for(self, clients: list[str]) -> float:
        """The seconds until the longest ban of `clients` ends (0: none is banned)."""


@dataclasses.dataclass
class MemoryStore:
    """The limits' state in this process."""

    clock: Callable[[], float] = time.monotonic
    # client -> (tokens, as of when, its bucket's size)
    _buckets: dict[str, tuple[float, float, int]] = dataclasses.field(default_factory=dict)
    # client -> (its refusals, when its window started, the window's seconds)
    _refusals: dict[str, tuple[int, float, float]] = dataclasses.field(default_factory=dict)
    _bans: dict[str, float] = dataclasses.field(default_factory=dict)  # client -> its end
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def take(self, client: str, cost: int, size: int) -> float:
        with self._lock:
            now = self.clock()
            tokens, then, _ = self._buckets.get(client, (size, now, size))
            tokens = min(size, tokens + (now - then) * size / 60)
            taken = tokens >= cost
            self._buckets[client] = (tokens - cost if taken else tokens, now, size)
            # A bucket refilled by now can go: a client seen again starts full anyway.
            _bound(self._buckets, lambda b: b[0] + (now - b[1]) * b[2] / 60 >= b[2])
            return 0.0 if taken else (cost - tokens) * 60 / size

    def refused(self, client: str, threshold: int, window_s: float, ban_s: float) -> None:
        with self._lock:
            now = self.clock()
            count, start, _ = self._refusals.get(client, (0, now, window_s))
            if now - start > window_s:
                count, start = 0, now
            if count + 1 > threshold:
                self._refusals.pop(client, None)
                self._bans[client] = now + ban_s
            else:
                self._refusals[client] = (count + 1, start, window_s)
            _bound(self._refusals, lambda r: now - r[1] > r[2])
            _bound(self._bans, lambda end: end <= now)

    def banned_for(self, clients: list[str]) -> float:
        with self._lock:
            now = self.clock()
            return max(0.0, *(self._bans.get(client, now) - now for client in clients))


def open_store(url: str) -> LimitStore:
    """The store `url` names: `memory://` (this process) or `redis://HOST:PORT/DB` (also
    `rediss://`, `unix://`).

    Raises:
        DataError: another scheme, or a Redis that cannot be reached (naming the url).
    """
    if url == "memory://":
        return MemoryStore()
    if url.split("://")[0] in ("redis", "rediss", "unix"):
        return RedisStore(url)
    raise DataError(f"--req-limit-storage {url!r}: expected memory:// or redis://HOST:PORT/DB")


def _bound(table: dict, stale: Callable[[object], bool]) -> None:
    """Keep `table` within MAX_CLIENTS entries: past it, drop the stale ones, or else the
    oldest half."""
    if len(table) > MAX_CLIENTS:
        gone = [client for client, value in table.items() if stale(value)]
        for client in gone or list(table)[:len(table) // 2]:
            del table[client]


# The bucket of KEYS[1] (tokens, then), ARGV: cost, size; Redis's clock, shared by every
# process. Returns nil when taken, else the seconds to wait (as a string: Lua numbers reach
# the client as integers).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cost, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'then')
local then_ = tonumber(b[2]) or now
local tokens = math.min(size, (tonumber(b[1]) or size) + (now - then_) * size / 60)
local taken = tokens >= cost
if taken then tokens = tokens - cost end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'then', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil((size - tokens) * 60 / size) + 1)
if taken then return false end
return tostring((cost - tokens) * 60 / size)
"""
# A refusal of the client whose count is KEYS[1] and ban KEYS[2]; ARGV: threshold, window and
# ban in milliseconds.
_REFUSED = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if count > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
return false
"""


class RedisStore:
    """The limits' state in a Redis database, for every process that names it. Each client's
    keys are named by a hash of it (no api key is written to Redis) and expire once stale."""

    def __init__(self, url: str, prefix: str = "vtx:limits:"):
        import redis

        try:
            self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            self._redis.ping()
        except (ValueError, redis.RedisError) as error:
            raise DataError(f"--req-limit-storage {url!r}: {error}") from None
        self._errors = redis.RedisError
        self._prefix = prefix
        self._take = self._redis.register_script(_TAKE)
        self._refused = self._redis.register_script(_REFUSED)

    def _key(self, kind: str, client: str) -> str:
        return self._prefix + kind + ":" + hashlib.sha256(client.encode()).hexdigest()[:32]

    def take(self, client: str, cost: int, size: int) -> float:
        wait = self._call(self._take, [self._key("bucket", client)], [cost, size])
        return 0.0 if wait is None else float(wait)

    def refused(self, client: str, threshold: int, window_s: float, ban_s: float) -> None:
        self._call(self._refused, [self._key("refusals", client), self._key("ban", client)],
                   [threshold, int(window_s * 1000), int(ban_s * 1000)])

    def banned_for(self, clients: list[str]) -> float:
        try:
            left = [self._redis.pttl(self._key("ban", client)) for client in clients]
        except self._errors as error:
            raise _unreachable(error) from None
        return max(0.0, *(ms / 1000 for ms in left))  # -2: no such key

    def _call(self, script, keys: list[str], args: list):
        try:
            return script(keys=keys, args=args)
        except self._errors as error:
            raise _unreachable(error) from None


def _unreachable(error: Exception) -> RequestError:
    return RequestError(f"the limits' storage (--req-limit-storage) failed: {str(error)[:120]}",
                        503, {"Retry-After": "5"})
