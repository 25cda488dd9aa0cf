"""Per-key token buckets: ``rate`` requests per second sustained, ``burst`` at once.

In memory, per API process (each replica limits on its own); with ``TURNGATE_LIMITS_URL``
:class:`turngate.security.redis_limits.RedisRateLimiter` shares the buckets between replicas
(docs/SECURITY.md).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> float:
        """Take one token for ``key``: 0.0 when allowed, else the seconds until one is available."""
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    async def acquire_async(self, key: str) -> float:
        """:meth:`acquire` for the event loop (in memory it never blocks; a shared limiter's does)."""
        return self.acquire(key)


def retry_after_header(wait_s: float) -> str:
    """Retry-After is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(wait_s)))
