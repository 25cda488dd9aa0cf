"""deploy/postgres/initdb.d/10-roles.sh, run for real against a throwaway PostgreSQL cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ProgrammingError

from tests.deploy.conftest import DEPLOY
from tests.ledger.helpers import draft
from tests.ledger.postgres import ThrowawayCluster, admin_connection, find_binaries
from turngate.ledger import LedgerStore, verify_ledger
from turngate.ledger.thread_list import ThreadFilter
from turngate.security.keys import KeyStore
from turngate.setup_cli import grant_app_role

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
        "TURNGATE_APP_DB_PASSWORD": "app-pw",
    }
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True, capture_output=True, text=True)
    with admin_connection(cluster_url) as conn:
        roles = dict(
            conn.execute(
                "SELECT rolname, rolcreatedb FROM pg_roles"
                " WHERE rolname IN ('temporal', 'turngate', 'turngate_app')"
            ).fetchall()
        )
        owner = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'turngate'"
        ).fetchone()
    assert roles == {"temporal": True, "turngate": False, "turngate_app": False}
    assert owner == ("turngate",)
    # The turngate role owns its database: the ledger migrates itself there on first start.
    ledger_url = cluster_url.set(username="turngate", password="turngate-pw", database="turngate")
    with LedgerStore(ledger_url.render_as_string(hide_password=False)) as store:
        store.append(draft("c-1"))
        assert verify_ledger(store).ok
        grant_app_role(store.engine, "turngate_app")  # what `turngate setup --app-role` does
        with store.engine.connect() as conn:  # the owner created pg_trgm for the search index
            indexes = conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = 'thread_search'"))
            assert "thread_search_trigrams" in set(indexes.scalars())
    # The application role appends and reads, and cannot rewrite history.
    app_url = cluster_url.set(username="turngate_app", password="app-pw", database="turngate")
    with LedgerStore(app_url.render_as_string(hide_password=False)) as store:
        store.append(draft("c-2"))
        store.append(draft("c-3", thread_id="a-new-thread"))  # its id goes to the search table
        assert verify_ledger(store).ok
        page, _head = store.thread_page(ThreadFilter(None, q="new-thr"), limit=10)
        assert [row.thread_id for row in page.threads] == ["a-new-thread"]
        created = KeyStore(store.engine).create("acme", "intent.write")
        assert KeyStore(store.engine).revoke(created.key.key_id)
        for statement in (
            "UPDATE events SET payload = payload",
            "DELETE FROM api_keys",
            "TRUNCATE events",
            "DROP TRIGGER events_append_only_truncate ON events",
            "CREATE TABLE mine (x int)",
        ):
            with (
                pytest.raises(ProgrammingError, match=r"permission denied|must be owner"),
                store.engine.begin() as conn,
            ):
                conn.execute(text(statement))


def test_roles_script_refuses_to_run_without_the_passwords(cluster_url: URL) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DB_PASSWORD")}
    env |= {"POSTGRES_USER": "postgres", "PGHOST": str(cluster_url.host), "PGPORT": str(cluster_url.port)}
    result = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "TEMPORAL_DB_PASSWORD is not set" in result.stderr
