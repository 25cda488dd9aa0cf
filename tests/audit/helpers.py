"""Ledgers for the audit tests, and the raw-SQL tampering an attacker with file access could do."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.verify import BuiltLedger, build_ledger

from turngate.artifacts import open_artifact_store
from turngate.artifacts.store import ArtifactStore
from turngate.core.canonical import canonical_bytes
from turngate.core.context import ContextConfig, load_context_config
from turngate.ledger import LedgerStore
from turngate.ledger.chain_check import recompute_digest
from turngate.settings import Settings, load_settings


@dataclass
class Ledger:
    """A ledger on disk (``<data_dir>/ledger.sqlite3``) with its artifacts (``<data_dir>/artifacts``)."""

    data_dir: Path
    store: LedgerStore
    built: BuiltLedger

    @property
    def path(self) -> Path:
        return self.data_dir / "ledger.sqlite3"

    @property
    def artifacts_root(self) -> Path:
        return self.data_dir / "artifacts"

    def artifacts(self) -> ArtifactStore:
        return open_artifact_store(str(self.artifacts_root))

    def settings(self, **overrides: Any) -> Settings:
        return load_settings(data_dir=self.data_dir, **overrides)

    def raw(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        return conn

    def rows(self, where: str = "1=1", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self.raw() as conn:
            conn.row_factory = sqlite3.Row
            query = f'SELECT * FROM events WHERE {where} ORDER BY "index"'
            return [dict(r) for r in conn.execute(query, params)]

    def row(self, correlation_id: str, kind: str) -> dict[str, Any]:
        return self.rows("correlation_id = ? AND kind = ?", (correlation_id, kind))[0]

    def drop_triggers(self) -> None:
        with self.raw() as conn:
            conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
            conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> None:
        self.drop_triggers()
        with self.raw() as conn:
            conn.execute(statement, params)

    def edit_payload(self, index: int, change: Callable[[dict[str, Any]], None], *, reseal: bool) -> None:
        """Rewrite the payload of event ``index`` (as canonical JSON). With ``reseal``, recompute
        its digest and every later digest and link too: a forger who rewrites the whole tail, so
        that the chain itself verifies."""
        [row] = self.rows('"index" = ?', (index,))
        payload = json.loads(row["payload"])
        change(payload)
        self.execute(
            'UPDATE events SET payload = ? WHERE "index" = ?', (canonical_bytes(payload).decode(), index)
        )
        if reseal:
            self.reseal_from(index)

    def reseal_from(self, index: int) -> None:
        rows = self.rows('"index" >= ?', (index,))
        prev = self.rows('"index" = ?', (index - 1,))[0]["digest"] if index > 0 else None
        with self.raw() as conn:
            for row in rows:
                row["prev_event_digest"] = prev
                digest = recompute_digest(row)
                conn.execute(
                    'UPDATE events SET digest = ?, prev_event_digest = ? WHERE "index" = ?',
                    (digest, prev, row["index"]),
                )
                prev = digest


def make_ledger(data_dir: Path, turns: int, **kw: Any) -> Ledger:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = LedgerStore(f"sqlite:///{(data_dir / 'ledger.sqlite3').as_posix()}")
    built = build_ledger(store, turns, artifacts_root=data_dir / "artifacts", **kw)
    return Ledger(data_dir=data_dir, store=store, built=built)


def config() -> ContextConfig:
    return load_context_config(None, {})


def kinds(findings: list[Any]) -> list[tuple[str, int | None]]:
    return [(f.kind.value, f.index) for f in findings]
