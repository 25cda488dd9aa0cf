"""Who may record an INTENT in a thread: the rule that makes a thread id one tenant's.

Ids are global (a thread or correlation id another tenant already uses is refused), but the
API's check before a turn starts reads a ledger that has nothing until the worker records the
INTENT: two tenants can race on the same ids. The rule below is therefore applied again where
the INTENT is appended, under the ledger's write lock (one serialization point for every API and
worker process): the first tenant recorded in a thread owns it, and a later INTENT it would mix
in is refused (:class:`ThreadInUseError`, never recorded). The API reads the same rule to tell
its caller why its turn was refused (409 ``admission.correlation_conflict``).

- An INTENT of tenant T (a tenant-scoped key) is refused when its thread holds an event of any
  other tenant (no tenant counts as another).
- An INTENT without a tenant (an operator key, or no keys) may join any thread, but not a turn
  (thread id, turn id) that holds a tenant's events.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, String, bindparam, exists, or_, select

from turngate.core.events import Event
from turngate.ledger.errors import LedgerConflictError
from turngate.ledger.schema import events


class ThreadInUseError(LedgerConflictError):
    """The INTENT's thread (or, without a tenant, its turn) holds another tenant's events."""

    def __init__(self, correlation_id: str, thread_id: str) -> None:
        super().__init__(correlation_id, "INTENT", -1)
        self.args = (f"ledger conflict: thread {thread_id!r} holds another tenant's events",)
        self.thread_id = thread_id


def _ranges(tenant: ColumnElement[str] | None) -> list[ColumnElement[bool]]:
    column = events.c.tenant_id
    if tenant is None:
        return [column.is_not(None)]
    # one EXISTS per range ("!=" and OR would scan the thread's index entries instead)
    return [column.is_(None), column < tenant, column > tenant]


def _blocked(with_tenant: bool) -> Select[tuple[bool]]:
    scope = [events.c.thread_id == bindparam("thread_id")]
    if not with_tenant:
        scope.append(events.c.turn_id == bindparam("turn_id"))
    tenant = bindparam("tenant_id", type_=String) if with_tenant else None
    return select(or_(*(exists().where(*scope, part) for part in _ranges(tenant))))


# Built once: SQLAlchemy reuses a constant statement's cache key and compiled form (every
# INTENT is checked against it, at admission and under the write lock).
_BLOCKED = {False: _blocked(False), True: _blocked(True)}


def blocked_statement(
    tenant_id: str | None, thread_id: str, turn_id: str
) -> tuple[Select[tuple[bool]], dict[str, str]]:
    """``SELECT`` whether an INTENT of ``tenant_id`` in (``thread_id``, ``turn_id``) is refused,
    with its parameters: index seeks on (thread_id, tenant_id) or (thread_id, turn_id), whatever
    the thread's length."""
    if tenant_id is None:
        return _BLOCKED[False], {"thread_id": thread_id, "turn_id": turn_id}
    return _BLOCKED[True], {"thread_id": thread_id, "tenant_id": tenant_id}


def blocks_intent(tenant_id: str | None, thread_id: str, turn_id: str, event: Event) -> bool:
    """Whether ``event`` (recorded) refuses a later INTENT of ``tenant_id`` in this turn: the
    rule of :func:`blocked_statement`, for one event."""
    if event.thread_id != thread_id or event.tenant_id == tenant_id:
        return False
    return tenant_id is not None or (event.turn_id == turn_id and event.tenant_id is not None)
