"""An exported event stream, verified offline (`turngate verify --events FILE`).

The export is JSON Lines as `/snapshot` writes its pages: each line is either one event (an
entry of a page's ``events``, e.g. ``curl .../snapshot?... | jq -c '.events[]'``) or a whole
page (``{"length", "offset", "limit", "v_digest", "events"}``). Its events are loaded, exactly
as exported, into a throwaway SQLite ledger, and :func:`turngate.audit.verify_all` runs over it
with the same code as over a live ledger: every digest recomputed from its payload, every chain
link, every DECISION re-derived from its INTENT and ref candidates, and (with an artifacts
directory) every artifact pointer re-hashed. Nothing is trusted from the export but its rows, and
no database of the gateway is needed.

The events must be one ledger from index 0 without gaps, in any order (verify it up to any
index: ``--until``); a range that starts later is refused, since its first chain link and its
refs to earlier events could not be checked.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import insert

from turngate.core.events import Event
from turngate.ledger import LedgerStore
from turngate.ledger.rows import (
    event_to_row,
)
from turngate.ledger.schema import events as events_table

INSERT_BATCH = 1000


class ExportError(ValueError):
    """The export cannot be read as a ledger range (the message names the line)."""


def read_exported_events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of an export, line by line (a page line yields its ``events``)."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ExportError(f"line {number}: not JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise ExportError(f"line {number}: not a JSON object")
        entries = record["events"] if isinstance(record.get("events"), list) else [record]
        for entry in entries:
            yield _event(entry, number)


def _event(entry: Any, number: int) -> Event:
    try:
        return Event.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise ExportError(f"line {number}: not an exported event: {where}: {first.get('msg')}") from None


@contextlib.contextmanager
def ledger_from_export(path: Path) -> Iterator[LedgerStore]:
    """A throwaway ledger holding the export's events."""
    with tempfile.TemporaryDirectory(prefix="turngate-export-") as tmp:
        store = LedgerStore(f"sqlite:///{Path(tmp) / 'ledger.sqlite3'}")
        try:
            _load(store, path)
            yield store
        finally:
            store.close()


def _load(store: LedgerStore, path: Path) -> None:
    seen: set[int] = set()
    batch: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as lines, store.engine.begin() as conn:
        for event in read_exported_events(lines):
            if event.index in seen:
                raise ExportError(f"index {event.index} appears twice in the export")
            seen.add(event.index)
            batch.append(event_to_row(event))
            if len(batch) >= INSERT_BATCH:
                conn.execute(insert(events_table), batch)
                batch.clear()
        if batch:
            conn.execute(insert(events_table), batch)
    if seen and min(seen) != 0:
        raise ExportError(
            f"the export starts at index {min(seen)}: export the ledger from index 0 (the first "
            "chain link and refs to earlier events cannot be checked without them)"
        )
    if seen and max(seen) + 1 != len(seen):
        missing = min(set(range(max(seen) + 1)) - seen)
        raise ExportError(f"the export has a gap: index {missing} is missing")
