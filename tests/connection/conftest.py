from __future__ import annotations

import pytest

from tests.connection.certs import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def temporal_env_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No TEMPORAL_* of the developer's shell, and no config file of theirs, leaks in."""
    import os

    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path_factory.mktemp("cfg") / "absent.toml"))
