"""The per-key request limits an API process enforces: the token-bucket rate limit and the
count of open SSE streams. One factory, so the app never cares where the counts live."""

from __future__ import annotations

from dataclasses import dataclass

from turngate.security.ratelimit import RateLimiter
from turngate.security.streams import StreamSlots
from turngate.settings import Settings


@dataclass(frozen=True)
class Limits:
    rate: RateLimiter
    streams: StreamSlots
    #: where the counts live: "process" (each API replica limits on its own)
    scope: str


def open_limits(settings: Settings) -> Limits:
    """The limits for one API process, as configured."""
    return Limits(
        rate=RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst),
        streams=StreamSlots(settings.max_streams_per_key),
        scope="process",
    )
