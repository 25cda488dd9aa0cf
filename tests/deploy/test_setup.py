"""`turngate setup` on its own: migrates, creates the encryption key file once, and bootstraps
one admin key only while no active admin key exists (a deleted key file mints no second admin)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from turngate.cli import build_parser
from turngate.encryption import load_keys
from turngate.ledger import LedgerStore
from turngate.security.keys import KeyStore
from turngate.security.principal import ROLE_ADMIN
from turngate.setup_cli import grant_app_role


def _setup(tmp_path: Path, ledger: str, *extra: str) -> None:
    args = build_parser().parse_args(["setup", "--ledger-url", ledger, *extra])  # `turngate setup ...`
    assert asyncio.run(args.run(args)) == 0


def test_setup_bootstraps_keys_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    keys_file, admin_file = tmp_path / "run" / "encryption-keys", tmp_path / "run" / "admin-key"
    args = ("--encryption-keys-file", str(keys_file), "--admin-key-file", str(admin_file))
    _setup(tmp_path, ledger, *args)
    assert "admin key: written to" in capsys.readouterr().out
    for path in (keys_file, admin_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = load_keys(None, keys_file)
    assert keys is not None and keys.active_id.startswith("k")
    secret = admin_file.read_text().strip()
    with LedgerStore(ledger) as store:
        [admin] = KeyStore(store.engine).list()
        assert ROLE_ADMIN in admin.roles and admin.tenant_id == "*"
        assert KeyStore(store.engine).lookup(secret) is not None

    key_text = keys_file.read_text()
    admin_file.unlink()  # moved to a password manager
    _setup(tmp_path, ledger, *args)
    assert "an admin key exists; none created" in capsys.readouterr().out
    assert not admin_file.exists()
    assert keys_file.read_text() == key_text  # the key is kept: histories stay readable
    with LedgerStore(ledger) as store:
        assert len(KeyStore(store.engine).list()) == 1


def test_app_role_grants_need_postgresql(tmp_path: Path) -> None:
    with (
        LedgerStore(f"sqlite:///{tmp_path / 'l.sqlite3'}") as store,
        pytest.raises(SystemExit, match="PostgreSQL"),
    ):
        grant_app_role(store.engine, "turngate_app")
