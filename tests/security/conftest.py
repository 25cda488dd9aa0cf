"""Fixtures for the trust-boundary tests: a stack with API keys on (``auth_mode="keys"``), keys
made straight in its ledger, and the ledger suite's two backends for the store-level tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledger.conftest import ledger_path, ledger_url, pytest_generate_tests, store  # noqa: F401
from tests.stack import make_settings
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.security.keys import KeyStore
from turngate.settings import Settings


@pytest.fixture
def secure_settings(tmp_path: Path, temporal_server: DevServer) -> Settings:
    return make_settings(tmp_path, temporal_server.address, auth_mode="keys", wait_timeout_s=8.0)


def make_key(settings: Settings, tenant: str, roles: str, name: str | None = None) -> str:
    """A new key in ``settings``' ledger; returns its secret."""
    with LedgerStore(settings.effective_ledger_url) as ledger:
        return KeyStore(ledger.engine).create(tenant, roles, name).secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}
