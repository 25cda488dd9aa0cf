"""The reads every turn runs, built once with bind parameters.

A statement built per call (``select(events).where(column == value)``) is keyed and looked up
in SQLAlchemy's compiled cache each time, about 0.2 ms of CPU; a constant statement keeps its
cache key and compiled form, and only its parameters change. A turn runs about ten of these.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, Select, String, bindparam, exists, or_, select

from turngate.core.events import EventKind
from turngate.ledger.schema import events, index_column


def tenant_params(tenant_id: str | None, **params: Any) -> dict[str, Any]:
    """The parameters of a statement keyed by whether a tenant is given: ``tenant_id`` only
    when it is."""
    return params if tenant_id is None else {**params, "tenant_id": tenant_id}


def _of_tenant(query: Select[Any]) -> Select[Any]:
    return query.where(events.c.tenant_id == bindparam("tenant_id"))


_BY_CORRELATION = select(events).where(events.c.correlation_id == bindparam("correlation_id"))
_TURN_EVENTS = select(events).where(
    events.c.thread_id == bindparam("thread_id"), events.c.turn_id == bindparam("turn_id")
)
#: Every event of a correlation id, ordered by index; keyed by whether one tenant's only.
BY_CORRELATION = {
    False: _BY_CORRELATION.order_by(index_column),
    True: _of_tenant(_BY_CORRELATION).order_by(index_column),
}
#: Every event of a turn (thread_id, turn_id), ordered by index; keyed as above.
TURN_EVENTS = {
    False: _TURN_EVENTS.order_by(index_column),
    True: _of_tenant(_TURN_EVENTS).order_by(index_column),
}
#: Events after an index, ascending, at most ``limit`` (the unfiltered live tail).
SINCE = (
    select(events)
    .where(index_column > bindparam("after", type_=Integer))
    .order_by(index_column)
    .limit(bindparam("limit", type_=Integer))
)
#: Whether the INTENT of a correlation id is recorded.
INTENT_RECORDED = select(index_column).where(
    events.c.correlation_id == bindparam("correlation_id"), events.c.kind == str(EventKind.INTENT)
)

_tenant = events.c.tenant_id
_in_thread = events.c.thread_id == bindparam("thread_id")
_other = bindparam("tenant_id", type_=String)
_OTHER_RANGES = (_tenant.is_(None), _tenant < _other, _tenant > _other)
#: Whether a thread holds an event of another tenant than ``tenant_id``; keyed by whether a
#: tenant is given (without one, any tenant's event is another's). One EXISTS per range: "!="
#: and OR would scan the thread's index entries instead.
OTHER_TENANT_IN_THREAD = {
    False: select(exists().where(_in_thread, _tenant.is_not(None))),
    True: select(
        or_(
            *(
                exists().where(_in_thread, part)
                for part in (_tenant.is_(None), _tenant < _other, _tenant > _other)
            )
        )
    ),
}
