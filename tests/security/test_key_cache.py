"""The API-key cache: a revoked key is refused within TURNGATE_AUTH_KEY_CACHE_S, never later."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from tests.security.conftest import bearer
from tests.stack import running_stack
from turngate.ledger import LedgerStore
from turngate.security.key_cache import KeyCache
from turngate.security.keys import KeyStore
from turngate.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_active_key_is_trusted_until_the_bound_and_looked_up_again_at_it(store: LedgerStore) -> None:
    keys = KeyStore(store.engine)
    created = keys.create("acme", "snapshot.read")
    clock = Clock()
    cache = KeyCache(keys, ttl_s=5.0, clock=clock)
    assert cache.cached(created.secret) is None  # never looked up yet
    assert cache.lookup(created.secret) == created.key
    keys.revoke(created.key.key_id)
    clock.now += 4.999  # just under the bound: still trusted without a lookup
    assert cache.cached(created.secret) == created.key
    clock.now += 0.001  # at the bound: looked up again, and now refused
    assert cache.cached(created.secret) is None
    assert cache.lookup(created.secret) is None
    assert cache.cached(created.secret) is None  # a refused key is not remembered


def test_unknown_keys_are_not_remembered_and_zero_turns_the_cache_off(store: LedgerStore) -> None:
    keys = KeyStore(store.engine)
    cache = KeyCache(keys, ttl_s=5.0)
    assert cache.lookup("tgk_unknown_key") is None and cache.cached("tgk_unknown_key") is None
    created = keys.create("acme", "snapshot.read")
    off = KeyCache(keys, ttl_s=0.0)
    assert off.lookup(created.secret) == created.key
    assert off.cached(created.secret) is None


def test_the_cache_is_bounded_and_drops_its_oldest_entry(store: LedgerStore) -> None:
    keys = KeyStore(store.engine)
    made = [keys.create("acme", "snapshot.read") for _ in range(3)]
    cache = KeyCache(keys, ttl_s=60.0, max_entries=2)
    for created in made:
        cache.lookup(created.secret)
    assert cache.cached(made[0].secret) is None
    assert cache.cached(made[1].secret) == made[1].key and cache.cached(made[2].secret) == made[2].key


def _revoke_with_cli(settings: Settings, key_id: str) -> None:
    env = {**os.environ, "TURNGATE_LEDGER_URL": settings.effective_ledger_url}
    done = subprocess.run(
        [sys.executable, "-m", "turngate", "keys", "revoke", key_id], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


async def test_a_key_revoked_by_the_cli_is_refused_within_the_bound(secure_settings: Settings) -> None:
    bound_s = 6.0
    settings = secure_settings.model_copy(update={"auth_key_cache_s": bound_s})
    with LedgerStore(settings.effective_ledger_url) as ledger:
        created = KeyStore(ledger.engine).create("acme", "snapshot.read")
    async with running_stack(settings, worker=False) as stack:
        first_lookup = time.monotonic()  # the cache entry is no older than this ...
        assert (await stack.http.get("/snapshot", headers=bearer(created.secret))).status_code == 200
        cached_by = time.monotonic()  # ... and no younger than this (it exists once answered)
        await asyncio.to_thread(_revoke_with_cli, settings, created.key.key_id)
        # Within the bound the remembered key still gets in (that is what the bound allows) ...
        still = await stack.http.get("/snapshot", headers=bearer(created.secret))
        if time.monotonic() - first_lookup < bound_s - 1.0:
            assert still.status_code == 200
        # ... and once the bound has passed since its lookup, it is refused (asyncio.sleep may
        # wake a clock tick early: 50 ms over the bound).
        await asyncio.sleep(max(0.0, cached_by + bound_s + 0.05 - time.monotonic()))
        gone = await stack.http.get("/snapshot", headers=bearer(created.secret))
        assert gone.status_code == 401 and gone.json()["reason_code"] == "auth.invalid"


def test_the_documented_bound_and_its_limits() -> None:
    assert Settings.model_fields["auth_key_cache_s"].default == 5.0  # docs/SECURITY.md
    for ok in ("0", "300"):
        assert Settings(TURNGATE_AUTH_KEY_CACHE_S=ok).auth_key_cache_s == float(ok)
    for bad in ("-0.1", "300.1"):
        with pytest.raises(ValidationError):
            Settings(TURNGATE_AUTH_KEY_CACHE_S=bad)
