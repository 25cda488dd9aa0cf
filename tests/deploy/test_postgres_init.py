"""deploy/postgres/initdb.d/10-roles.sh, run for real against a throwaway PostgreSQL cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import URL

from tests.deploy.conftest import DEPLOY
from tests.ledger.helpers import draft
from tests.ledger.postgres import ThrowawayCluster, admin_connection, find_binaries
from turngate.ledger import LedgerStore, verify_ledger

SCRIPT = DEPLOY / "postgres" / "initdb.d" / "10-roles.sh"


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[URL]:
    """A brand-new cluster, as the postgres image has when it runs initdb.d (a shared server would
    already have, or must not get, these roles)."""
    bin_dir, where = find_binaries()
    if bin_dir is None or shutil.which("psql") is None:
        pytest.skip(f"no initdb/pg_ctl/psql (looked in {where}): the init script is not run here")
    cluster = ThrowawayCluster(bin_dir)
    try:
        url = cluster.start()
    except Exception as exc:
        cluster.stop()
        pytest.skip(f"could not start a throwaway cluster: {exc}")
    try:
        yield url
    finally:
        cluster.stop()


def test_roles_script_creates_the_roles_and_the_ledger_database(cluster_url: URL) -> None:
    env = {
        **os.environ,
        "POSTGRES_USER": "postgres",
        "PGHOST": str(cluster_url.host),
        "PGPORT": str(cluster_url.port),
        "TEMPORAL_DB_PASSWORD": "temporal-pw",
        "TURNGATE_DB_PASSWORD": "turngate-pw",
    }
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True, capture_output=True, text=True)
    with admin_connection(cluster_url) as conn:
        roles = dict(
            conn.execute(
                "SELECT rolname, rolcreatedb FROM pg_roles WHERE rolname IN ('temporal', 'turngate')"
            ).fetchall()
        )
        owner = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'turngate'"
        ).fetchone()
    assert roles == {"temporal": True, "turngate": False}
    assert owner == ("turngate",)
    # The turngate role owns its database: the ledger migrates itself there on first start.
    ledger_url = cluster_url.set(username="turngate", password="turngate-pw", database="turngate")
    with LedgerStore(ledger_url.render_as_string(hide_password=False)) as store:
        store.append(draft("c-1"))
        assert verify_ledger(store).ok


def test_roles_script_refuses_to_run_without_the_passwords(cluster_url: URL) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DB_PASSWORD")}
    env |= {"POSTGRES_USER": "postgres", "PGHOST": str(cluster_url.host), "PGPORT": str(cluster_url.port)}
    result = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "TEMPORAL_DB_PASSWORD is not set" in result.stderr
