"""verify_all and replay_turn on the PostgreSQL ledger (a throwaway cluster or a configured
server, found by tests.ledger.postgres; skipped loudly without one)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.verify import build_ledger
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.audit.helpers import config, kinds
from tests.ledger import postgres
from turngate.audit import verify_all
from turngate.audit.replay import replay_turn
from turngate.ledger import LedgerStore
from turngate.ledger.engine import (
    normalize_url,
)


@pytest.fixture(scope="module")
def server() -> Iterator[postgres.PostgresServer]:
    found = postgres.acquire()
    if isinstance(found, str):
        pytest.skip(found)
    try:
        yield found
    finally:
        found.close()


def test_verify_and_replay_on_postgresql(server: postgres.PostgresServer, tmp_path: Path) -> None:
    with server.fresh_database() as url:
        store = LedgerStore(url)
        try:
            built = build_ledger(store, 24, threads=4, deny_every=5, artifacts_root=tmp_path)
            report = verify_all(store, artifacts=None, context_config=config())
            assert report.ok, report.failures
            assert (report.checked_events, report.checked_decisions) == (built.events, 24)
            assert replay_turn(
                store, "c-0000009", context_config=config(), policy_module="turngate.policies.allow_all"
            ).ok

            engine = create_engine(normalize_url(url), poolclass=NullPool)
            with engine.begin() as conn:
                conn.execute(text("DROP TRIGGER events_append_only_update_delete ON events"))
                query = (
                    'SELECT "index", payload FROM events WHERE kind = \'DECISION\' ORDER BY "index" LIMIT 1'
                )
                row = conn.execute(text(query)).one()
                payload = json.loads(row.payload)
                payload["reason_codes"] = ["forged"]
                conn.execute(
                    text('UPDATE events SET payload = :p WHERE "index" = :i'),
                    {"p": json.dumps(payload), "i": row.index},
                )
            engine.dispose()
            tampered = verify_all(store, artifacts=None, context_config=config())
            assert ("digest_mismatch", row.index) in kinds(tampered.failures)
        finally:
            store.close()
