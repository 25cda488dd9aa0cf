"""`turngate dev` prints one admin key per data directory: reused on every start (never a new
live admin key per start), replaced, and the old one revoked, when its file or key is gone."""

from __future__ import annotations

import stat
from pathlib import Path

from turngate.ledger import LedgerStore
from turngate.security.dev_key import DEV_KEY_FILE, DEV_KEY_NAME, dev_key
from turngate.security.keys import KeyStore


def _active_dev_keys(keys: KeyStore) -> list[str]:
    return [k.key_id for k in keys.list() if k.name == DEV_KEY_NAME and k.revoked_at is None]


def test_the_dev_key_is_reused_and_a_replaced_one_is_revoked(tmp_path: Path) -> None:
    with LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        keys = KeyStore(ledger.engine)
        first = dev_key(ledger.engine, tmp_path)
        assert [dev_key(ledger.engine, tmp_path) for _ in range(3)] == [first] * 3  # three restarts
        assert len(_active_dev_keys(keys)) == 1
        found = keys.lookup(first)
        assert found is not None and found.tenant_id == "dev" and "admin" in found.roles
        key_file = tmp_path / DEV_KEY_FILE
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

        key_file.unlink()  # the secret is lost: a new key, and the old one no longer works
        second = dev_key(ledger.engine, tmp_path)
        assert second != first and keys.lookup(first) is None
        assert len(_active_dev_keys(keys)) == 1

        keys.revoke(keys.lookup(second).key_id)  # type: ignore[union-attr]
        third = dev_key(ledger.engine, tmp_path)  # revoked by hand: replaced on the next start
        assert third not in (first, second) and keys.lookup(third) is not None
        other = keys.create("acme", "admin", name="ops").secret
        key_file.write_text(other)  # a file naming another key is not trusted, nor is it revoked
        fourth = dev_key(ledger.engine, tmp_path)
        assert fourth != other and keys.lookup(other) is not None
        assert len(_active_dev_keys(keys)) == 1
