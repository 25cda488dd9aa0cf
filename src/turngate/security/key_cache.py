"""Active API keys remembered for a few seconds, so a request does not cost a database lookup.

Only keys found active are remembered (by the sha256 of the secret, never the secret): an
unknown key is looked up every time, so a new key works at once. A key revoked in the database
(`turngate keys revoke`, from any process) is refused once its entry is older than ``ttl_s``:
revocation takes effect within ``TURNGATE_AUTH_KEY_CACHE_S`` seconds (0: every request looks
the key up, revocation is immediate). Each API process has its own cache; the bound holds for
each.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from turngate.security.keys import ApiKey, KeyStore, hash_secret

MAX_ENTRIES = 4096


class KeyCache:
    def __init__(
        self,
        keys: KeyStore,
        ttl_s: float,
        *,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, ApiKey]] = {}

    def cached(self, secret: str) -> ApiKey | None:
        """The key if it was found active less than ``ttl_s`` ago (no database access)."""
        if self.ttl_s <= 0:
            return None
        digest = hash_secret(secret)
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if self._clock() - entry[0] >= self.ttl_s:
            del self._entries[digest]
            return None
        return entry[1]

    def lookup(self, secret: str) -> ApiKey | None:
        """Look the key up in the database (blocking) and remember it when active."""
        looked_up_at = self._clock()  # before the read: an entry is never younger than its data
        key = self.keys.lookup(secret)
        if key is not None and self.ttl_s > 0:
            if len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]  # the oldest entry
            self._entries[hash_secret(secret)] = (looked_up_at, key)
        return key
