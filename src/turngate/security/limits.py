"""The per-key request limits an API process enforces: the token-bucket rate limit and the
count of open SSE streams. One factory, so the app never cares where the counts live:

- ``TURNGATE_LIMITS_URL`` unset: in this process's memory (each API replica limits on its own);
- ``redis://...`` or ``rediss://...``: in that Redis, shared by every replica
  (:mod:`turngate.security.redis_limits`, which also says what happens when Redis is down).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from turngate.security.ratelimit import RateLimiter
from turngate.security.streams import StreamSlots
from turngate.settings import Settings

REDIS_SCHEMES = ("redis", "rediss")


class LimitsUrlError(ValueError):
    """TURNGATE_LIMITS_URL names no supported backend or has an unknown option."""


@dataclass(frozen=True)
class Limits:
    rate: RateLimiter
    streams: StreamSlots
    #: where the counts live: "process" (each API replica limits on its own) or "redis" (shared)
    scope: str

    def close(self) -> None:
        """Release what a shared backend holds (its client; open streams' leases then expire)."""
        for limit in (self.streams, self.rate):
            close = getattr(limit, "close", None)
            if close is not None:
                close()


def open_limits(settings: Settings) -> Limits:
    """The limits for one API process, as configured."""
    url = settings.limits_url
    if not url:
        return Limits(
            rate=RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst),
            streams=StreamSlots(settings.max_streams_per_key),
            scope="process",
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme not in REDIS_SCHEMES:
        # The URL itself may carry a password: name only its scheme.
        raise LimitsUrlError(
            f"TURNGATE_LIMITS_URL with scheme {scheme!r} is not supported: use redis://host:port/db "
            "or rediss://host:port/db, or leave it unset for per-process limits"
        )
    from turngate.security.redis_limits import open_redis_limits

    rate, streams = open_redis_limits(
        url,
        rate_per_s=settings.rate_limit_per_s,
        burst=settings.rate_limit_burst,
        streams_per_key=settings.max_streams_per_key,
    )
    return Limits(rate=rate, streams=streams, scope="redis")
