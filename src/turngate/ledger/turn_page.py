"""One page of a thread's turns, for the observer UI: its INTENTs in order and their other events.

Two indexed queries whatever the thread's length: the page's INTENTs (a seek on
(thread_id, index)), then the DECISIONs and EXECUTIONs of those correlation ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.engine import Connection

from turngate.core.events import Event, EventKind
from turngate.ledger.schema import StoredRow, events, index_column


@dataclass(frozen=True)
class TurnPage:
    """A page of a thread's turns and the thread's counts, from one read snapshot."""

    events: int  # the thread's events (only the tenant's, when one is given)
    turns: int  # its INTENTs
    first_index: int | None
    last_index: int | None
    head_index: int | None  # the ledger's last index
    intents: list[Event]  # the page's INTENTs, in index order
    others: list[Event]  # their other events (DECISIONs, EXECUTIONs), in index order


def read_turn_page(
    conn: Connection,
    thread_id: str,
    *,
    tenant: list[ColumnElement[bool]],
    offset: int,
    limit: int,
    to_event: Callable[[StoredRow], Event],
) -> TurnPage:
    """The page (``tenant``: the conditions that keep one tenant's events, or none)."""
    base = [events.c.thread_id == thread_id, *tenant]
    is_intent = events.c.kind == str(EventKind.INTENT)
    count, turns, first, last = conn.execute(
        select(
            func.count(),
            func.sum(case((is_intent, 1), else_=0)),
            func.min(index_column),
            func.max(index_column),
        ).where(*base)
    ).one()
    intents = [
        to_event(row)
        for row in conn.execute(
            select(events).where(*base, is_intent).order_by(index_column).offset(offset).limit(limit)
        ).mappings()
    ]
    ids = [intent.correlation_id for intent in intents]
    others = (
        [
            to_event(row)
            for row in conn.execute(
                select(events)
                .where(*base, events.c.kind != str(EventKind.INTENT), events.c.correlation_id.in_(ids))
                .order_by(index_column)
            ).mappings()
        ]
        if ids
        else []
    )
    head = conn.execute(select(func.max(index_column))).scalar_one()
    return TurnPage(
        events=int(count or 0),
        turns=int(turns or 0),
        first_index=first,
        last_index=last,
        head_index=head,
        intents=intents,
        others=others,
    )
