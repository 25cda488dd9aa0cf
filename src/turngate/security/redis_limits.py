"""Per-key limits shared by every API replica, kept in Redis (``TURNGATE_LIMITS_URL=redis://...``).

Same interfaces and semantics as the in-process :class:`RateLimiter` and :class:`StreamSlots`,
with the counts in one Redis, so M replicas together allow a key its limit once, not M times.
Every decision is one Lua script (atomic across processes) on the Redis server's clock (``TIME``),
so the API hosts' clocks never matter. Keys hold a key id (``key_id``, ``oidc:<sub>``, ``dev``),
never a secret, under a prefix (``turngate:`` unless ``?key_prefix=`` in the URL says otherwise):

- ``<prefix>rate:<key>``: the token bucket (hash ``tokens``, ``ts``). It expires after the time a
  full refill takes: an absent bucket is a full one, so expiry loses nothing and idle keys vanish.
- ``<prefix>streams:<key>``: the open SSE streams (a sorted set: one member per open stream, a
  lease, scored with its expiry). Acquire drops expired leases, then adds one if fewer than the
  limit are left; release removes it. Each process keeps the leases it holds and a heartbeat
  thread renews them every ``lease_s / 3``, so a crashed API process's streams come back
  ``lease_s`` (30 s) after its last heartbeat. One lease per stream rather than a counter with a
  TTL: a counter leaks a dead process's slots for as long as another process keeps renewing it
  (a busy key would never get them back); a lease expires on its own. The set itself expires
  ``lease_s`` after its last renewal.

When Redis does not answer (connection refused, 0.25 s timeout, any Redis error) the limits fall
back to this process: the rate limit to an in-memory bucket per key, the stream limit to the
streams this process holds. Neither fails closed (a Redis outage must not become a gateway
outage) nor fully open (each replica still limits on its own, as without TURNGATE_LIMITS_URL).
A WARNING is logged at most once per 30 s while Redis is down, Redis is retried 5 s after a
failure, and an INFO line says when it answers again. Leases taken during an outage are local
only; those expiring during it are not re-created.

No Redis call runs on the API's event loop: the rate limit in a worker thread
(:meth:`RedisRateLimiter.acquire_async`, awaited by the auth dependency), the stream limit too
(:meth:`RedisStreamSlots.try_acquire_async`, awaited by the SSE routes); a stream's lease is
removed on a background thread (:meth:`RedisStreamSlots.release_nowait`, called from the stream's
``finally``). The synchronous ``try_acquire`` / ``release`` remain for threads and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.retry import Retry

from turngate.security.limits import LimitsUrlError
from turngate.security.ratelimit import RateLimiter
from turngate.security.streams import StreamSlots

log = logging.getLogger(__name__)

DEFAULT_KEY_PREFIX = "turngate:"
#: How long an open stream's lease lives without a heartbeat (a crashed process's slots return).
DEFAULT_LEASE_S = 30.0
#: Socket timeouts of the limits' Redis client; no retries (a slow Redis falls back instead).
REDIS_TIMEOUT_S = 0.25
#: After a failure, Redis is not asked again for this long (each request would pay the timeout).
RETRY_AFTER_FAILURE_S = 5.0
#: At most one WARNING per this many seconds while Redis is down.
WARN_EVERY_S = 30.0

_REDIS_ERRORS = (redis.RedisError, OSError)

# KEYS[1]: the bucket; ARGV: rate (tokens/s), burst. Returns the wait in seconds, "0" when taken
# (a string: Redis truncates Lua numbers to integers).
_TAKE_TOKEN = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000000)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(burst * 1000 / rate)))
return string.format('%.17g', wait)
"""

# KEYS[1]: the key's leases; ARGV: limit, lease ms, the new lease. Returns 1 when taken, 0 when full.
_TAKE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS[1]: the key's leases; ARGV: lease ms, then this process's leases to renew (never re-added).
_RENEW_SLOTS = """
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


class RedisOutage:
    """Whether Redis is considered down (shared by the rate and stream limits of one process):
    skip it for ``retry_s`` after a failure; warn at most once per ``warn_every_s``."""

    def __init__(
        self,
        retry_s: float = RETRY_AFTER_FAILURE_S,
        warn_every_s: float = WARN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_s = retry_s
        self.warn_every_s = warn_every_s
        self._clock = clock
        self._down_until: float | None = None
        self._warned_at: float | None = None
        self._lock = threading.Lock()

    @property
    def skipping(self) -> bool:
        """True while Redis is not to be asked (a failure less than ``retry_s`` ago)."""
        down_until = self._down_until
        return down_until is not None and self._clock() < down_until

    def failed(self, exc: BaseException) -> None:
        now = self._clock()
        with self._lock:
            self._down_until = now + self.retry_s
            warn = self._warned_at is None or now - self._warned_at >= self.warn_every_s
            if warn:
                self._warned_at = now
        if warn:
            log.warning(
                "shared limits: Redis (TURNGATE_LIMITS_URL) did not answer (%s: %s); rate and stream "
                "limits fall back to this API process's own counts until it does",
                type(exc).__name__,
                exc,
            )

    def answered(self) -> None:
        if self._down_until is None:
            return
        with self._lock:
            self._down_until = None
        log.info("shared limits: Redis answers again; rate and stream limits are shared again")


class RedisRateLimiter(RateLimiter):
    """A token bucket per key in Redis; the in-memory buckets of :class:`RateLimiter` are the
    fallback while Redis is down."""

    def __init__(
        self,
        client: redis.Redis,
        rate_per_s: float,
        burst: int,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        outage: RedisOutage | None = None,
    ) -> None:
        super().__init__(rate_per_s, burst)
        self._redis = client
        self._prefix = key_prefix + "rate:"
        self._outage = outage or RedisOutage()
        self._take = client.register_script(_TAKE_TOKEN)

    def redis_key(self, key: str) -> str:
        return self._prefix + key

    def acquire(self, key: str) -> float:
        """Take one token for ``key``: 0.0 when allowed, else the seconds until one is available.
        Blocks for a Redis round trip: call :meth:`acquire_async` on an event loop."""
        if self._outage.skipping:
            return super().acquire(key)
        try:
            wait = float(self._take(keys=[self.redis_key(key)], args=[repr(self.rate), self.burst]))
        except _REDIS_ERRORS as exc:
            self._outage.failed(exc)
            return super().acquire(key)
        self._outage.answered()
        return wait

    async def acquire_async(self, key: str) -> float:
        if self._outage.skipping:
            return super().acquire(key)  # in memory: no thread needed
        return await asyncio.to_thread(self.acquire, key)

    def close(self) -> None:
        self._redis.close()


class RedisStreamSlots(StreamSlots):
    """Open SSE streams per key as leases in Redis (see the module docstring); this process's
    own count is the fallback while Redis is down. :meth:`open_count` is this process's count."""

    def __init__(
        self,
        client: redis.Redis,
        per_key: int,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        lease_s: float = DEFAULT_LEASE_S,
        outage: RedisOutage | None = None,
    ) -> None:
        super().__init__(per_key)
        self.lease_s = lease_s
        self._lease_ms = max(1, round(lease_s * 1000))
        self._redis = client
        self._prefix = key_prefix + "streams:"
        self._outage = outage or RedisOutage()
        self._take = client.register_script(_TAKE_SLOT)
        self._renew = client.register_script(_RENEW_SLOTS)
        self._process = uuid.uuid4().hex[:12]
        self._serial = itertools.count(1)
        # key -> leases this process holds; None: a slot taken while Redis was down (local only)
        self._held: dict[str, list[str | None]] = {}
        self._lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        # release_nowait's Redis calls, in order, off the event loop
        self._releases = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turngate-stream-release")

    def redis_key(self, key: str) -> str:
        return self._prefix + key

    def try_acquire(self, key: str) -> bool:
        with self._lock:
            if len(self._held.get(key, ())) >= self.per_key:
                return False  # full in this process alone: no need to ask Redis
        lease: str | None = None
        if not self._outage.skipping:
            candidate = f"{self._process}:{next(self._serial)}"
            try:
                taken = self._take(keys=[self.redis_key(key)], args=[self.per_key, self._lease_ms, candidate])
            except _REDIS_ERRORS as exc:
                self._outage.failed(exc)
            else:
                self._outage.answered()
                if not int(taken):
                    return False
                lease = candidate
        with self._lock:
            self._held.setdefault(key, []).append(lease)
            if lease is not None:
                self._ensure_heartbeat()
        return True

    async def try_acquire_async(self, key: str) -> bool:
        """:meth:`try_acquire` with its Redis round trip in a thread, so a slow or hanging Redis
        (up to ``REDIS_TIMEOUT_S``) never stalls the event loop. A caller cancelled while it
        waits gets nothing: a slot taken for it meanwhile is given back."""
        if self._outage.skipping or self.open_count(key) >= self.per_key:
            return self.try_acquire(key)  # no Redis call on these paths
        attempt = asyncio.ensure_future(asyncio.to_thread(self.try_acquire, key))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(lambda done: self._give_back(done, key))
            raise

    def _give_back(self, attempt: asyncio.Future[bool], key: str) -> None:
        if not attempt.cancelled() and attempt.exception() is None and attempt.result():
            self.release_nowait(key)

    def release(self, key: str) -> None:
        """Give a slot back now (blocks for a Redis round trip: on an event loop use
        :meth:`release_nowait`)."""
        lease = self._forget_locally(key)
        if lease is not None:
            self._remove_lease(key, lease)

    def release_nowait(self, key: str) -> None:
        """Give a slot back: this process's count at once, the shared lease on a background
        thread a moment later (until then another replica may still count it)."""
        lease = self._forget_locally(key)
        if lease is not None:
            # RuntimeError: closing; the lease is no longer renewed and expires after lease_s
            with contextlib.suppress(RuntimeError):
                self._releases.submit(self._remove_lease, key, lease)

    def _forget_locally(self, key: str) -> str | None:
        """Drop one of ``key``'s slots here; the Redis lease to remove, if there is one to remove."""
        with self._lock:
            leases = self._held.get(key)
            if not leases:
                return None
            lease = leases.pop()
            if not leases:
                del self._held[key]
        if lease is None or self._outage.skipping:
            return None  # a local slot, or Redis down: the lease expires on its own
        return lease

    def _remove_lease(self, key: str, lease: str) -> None:
        try:
            self._redis.zrem(self.redis_key(key), lease)
        except _REDIS_ERRORS as exc:
            self._outage.failed(exc)

    def open_count(self, key: str) -> int:
        with self._lock:
            return len(self._held.get(key, ()))

    def close(self) -> None:
        """Finish pending releases, stop renewing leases (they expire after ``lease_s``) and
        close the client."""
        self._releases.shutdown(wait=True)
        self._stop.set()
        with self._lock:
            heartbeat = self._heartbeat
        if heartbeat is not None:
            heartbeat.join(timeout=2 * REDIS_TIMEOUT_S + 1)
        self._redis.close()

    # ------------------------------------------------------------------ heartbeat

    def _ensure_heartbeat(self) -> None:
        """Start the renewing thread if it is not running (called with the lock held)."""
        if self._stop.is_set() or (self._heartbeat is not None and self._heartbeat.is_alive()):
            return
        heartbeat = threading.Thread(target=self._renew_loop, name="turngate-stream-leases", daemon=True)
        self._heartbeat = heartbeat
        heartbeat.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self._lock:
                held = {key: [lease for lease in leases if lease] for key, leases in self._held.items()}
                held = {key: leases for key, leases in held.items() if leases}
                if not held:
                    self._heartbeat = None  # ends; the next lease starts a new one
                    return
            if self._outage.skipping:
                continue
            try:
                pipe = self._redis.pipeline(transaction=False)
                for key, leases in held.items():
                    self._renew(keys=[self.redis_key(key)], args=[self._lease_ms, *leases], client=pipe)
                pipe.execute()
            except _REDIS_ERRORS as exc:
                self._outage.failed(exc)
            else:
                self._outage.answered()


def open_redis_limits(
    url: str, *, rate_per_s: float, burst: int, streams_per_key: int, lease_s: float = DEFAULT_LEASE_S
) -> tuple[RedisRateLimiter, RedisStreamSlots]:
    """The rate and stream limits of one API process, shared through the Redis at ``url``
    (``redis://`` or ``rediss://``; ``?key_prefix=`` namespaces the keys, other query options go
    to the Redis client). One client and one outage state for both."""
    parts = urlsplit(url)
    options = parse_qsl(parts.query, keep_blank_values=True)
    prefix = DEFAULT_KEY_PREFIX
    passed: list[tuple[str, str]] = []
    for name, value in options:
        if name == "key_prefix":
            prefix = value
        elif name in URL_QUERY_ARGUMENT_PARSERS:
            passed.append((name, value))
        else:
            raise LimitsUrlError(f"TURNGATE_LIMITS_URL: unknown option {name!r} (turngate knows key_prefix)")
    client = redis.Redis.from_url(
        parts._replace(query=urlencode(passed)).geturl(),
        decode_responses=True,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    outage = RedisOutage()
    rate = RedisRateLimiter(client, rate_per_s, burst, key_prefix=prefix, outage=outage)
    streams = RedisStreamSlots(client, streams_per_key, key_prefix=prefix, lease_s=lease_s, outage=outage)
    return rate, streams
