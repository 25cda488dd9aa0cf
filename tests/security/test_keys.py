"""API keys: stored hashed, revocable, on both ledger backends; the `turngate keys` CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from turngate.cli import build_parser
from turngate.ledger import LedgerStore
from turngate.ledger.schema import api_keys
from turngate.security.keys import KeyStore, hash_secret
from turngate.security.principal import ROLE_ADMIN, ROLE_INTENT_WRITE, ROLE_SNAPSHOT_READ


def test_a_key_is_stored_hashed_and_looked_up_by_its_secret(store: LedgerStore) -> None:
    keys = KeyStore(store.engine)
    created = keys.create("acme", "intent.write,snapshot.read", name="ci")
    assert created.secret.startswith("tgk_") and len(created.secret) > 50
    with store.engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(select(api_keys))]
    assert len(rows) == 1
    assert rows[0]["secret_sha256"] == hash_secret(created.secret)
    assert created.secret not in json.dumps(rows)
    found = keys.lookup(created.secret)
    assert found is not None and found.key_id == created.key.key_id
    principal = found.principal()
    assert principal.tenant_id == "acme"
    assert principal.roles == {ROLE_INTENT_WRITE, ROLE_SNAPSHOT_READ}
    assert keys.lookup(created.secret + "x") is None
    assert keys.lookup("not-a-key") is None


def test_revoked_keys_are_refused_and_listed_as_revoked(store: LedgerStore) -> None:
    keys = KeyStore(store.engine)
    created = keys.create("acme", "admin")
    assert keys.revoke(created.key.key_id) is True
    assert keys.revoke(created.key.key_id) is False
    assert keys.lookup(created.secret) is None
    [listed] = keys.list()
    assert listed.revoked_at is not None and listed.roles == {ROLE_ADMIN}


def test_operator_keys_are_unscoped(store: LedgerStore) -> None:
    created = KeyStore(store.engine).create("*", "admin")
    assert created.key.principal().tenant_id is None


@pytest.mark.parametrize("roles", ["", "root", "admin,sudo"])
def test_bad_roles_are_refused(store: LedgerStore, roles: str) -> None:
    with pytest.raises(ValueError):
        KeyStore(store.engine).create("acme", roles)


def _cli(*args: str, ledger: Path) -> subprocess.CompletedProcess[str]:
    """`turngate keys ARGS` as a real process (exit status through the whole entry point)."""
    env = {**os.environ, "TURNGATE_LEDGER_URL": f"sqlite:///{ledger.as_posix()}"}
    return subprocess.run(
        [sys.executable, "-m", "turngate", "keys", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _in_process(capsys: pytest.CaptureFixture[str], *args: str, ledger: Path) -> tuple[int, str, str]:
    """`turngate keys ARGS` through the real parser and command, in this process (no interpreter
    start per call: the subprocess test above covers the entry point)."""
    capsys.readouterr()
    parsed = build_parser().parse_args(["keys", *args, "--ledger-url", f"sqlite:///{ledger.as_posix()}"])
    code = asyncio.run(parsed.run(parsed))
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_cli_create_in_a_real_process(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    made = _cli(
        "create",
        "--tenant",
        "acme",
        "--roles",
        "intent.write,snapshot.read",
        "--name",
        "ci",
        "--json",
        ledger=ledger,
    )
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["tenant_id"] == "acme" and key["roles"] == ["intent.write", "snapshot.read"]
    assert key["secret"].startswith("tgk_")
    bad = _cli("create", "--tenant", "acme", "--roles", "root", ledger=ledger)
    assert bad.returncode == 2 and "unknown role" in bad.stderr


def test_keys_cli_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    code, out, err = _in_process(
        capsys, "create", "--tenant", "acme", "--roles", "intent.write,snapshot.read", "--json", ledger=ledger
    )
    assert code == 0, err
    key = json.loads(out)

    code, out, _ = _in_process(capsys, "list", "--json", ledger=ledger)
    assert code == 0
    [entry] = json.loads(out)
    assert entry["key_id"] == key["key_id"] and "secret" not in entry
    assert key["secret"] not in out

    _, out, _ = _in_process(capsys, "list", ledger=ledger)
    assert key["key_id"] in out and "active" in out

    code, out, _ = _in_process(capsys, "revoke", key["key_id"], "--json", ledger=ledger)
    assert code == 0 and json.loads(out) == {"key_id": key["key_id"], "revoked": True}
    code, _, _ = _in_process(capsys, "revoke", key["key_id"], ledger=ledger)
    assert code == 1

    with pytest.raises(SystemExit):
        build_parser().parse_args(["keys", "create", "--help"])
    helped = capsys.readouterr().out
    assert "--tenant" in helped and "--roles" in helped


def test_turngate_dev_creates_a_working_local_admin_key(tmp_path: Path) -> None:
    from turngate.cli import _dev_key
    from turngate.settings import load_settings

    settings = load_settings(data_dir=tmp_path)
    secret = _dev_key(settings)
    with LedgerStore(settings.effective_ledger_url) as ledger:
        key = KeyStore(ledger.engine).lookup(secret)
    assert key is not None and key.tenant_id == "dev" and key.roles == {ROLE_ADMIN}
