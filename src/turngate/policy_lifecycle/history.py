"""Which policies decided the recorded turns, and the guard that keeps a version meaning one thing.

:func:`policy_history` streams every DECISION once and groups them by (policy id, version,
config digest): first and last time, and counts of ALLOW/DENY per reason code. Shadow policies
(``shadow`` in a DECISION) are listed too, with ``role`` "shadow": they decided nothing, but
what they would have decided is recorded.

:func:`version_conflict` answers the worker's start-up question: has the configured policy's id
and version already decided turns with another config digest? A changed policy must change its
version, or history stops saying which rules made which decision.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.engine import RowMapping

from turngate.core.canonical import canonical_bytes
from turngate.core.events import EventKind
from turngate.core.policy import LoadedPolicy
from turngate.ledger import LedgerStore
from turngate.ledger.schema import events, index_column

log = logging.getLogger(__name__)

Role = Literal["active", "shadow"]


class PolicyVersion(BaseModel):
    """One (policy id, version, config digest) and the turns it decided (or shadowed)."""

    role: Role
    policy_id: str
    policy_version: str
    config_digest: str
    first_at: str
    last_at: str
    first_index: int
    last_index: int
    decisions: int = 0
    #: "ALLOW" / "DENY" -> reason code -> count
    reasons: dict[str, dict[str, int]] = Field(default_factory=dict)

    @classmethod
    def first_seen(
        cls, role: Role, identity: tuple[str, str, str], row: Mapping[str, Any] | RowMapping
    ) -> PolicyVersion:
        """The version as the DECISION ``row`` (index, created_at) first shows it."""
        at, index = str(row["created_at"]), int(row["index"])
        return cls(
            role=role,
            policy_id=identity[0],
            policy_version=identity[1],
            config_digest=identity[2],
            first_at=at,
            last_at=at,
            first_index=index,
            last_index=index,
        )


class PolicyHistory(BaseModel):
    versions: list[PolicyVersion]
    decisions: int


class PolicyVersionConflictError(RuntimeError):
    """The configured policy's id+version decided turns under another config digest."""

    code = "policy.version_conflict"


def _identity(value: Any) -> tuple[str, str, str] | None:
    if not isinstance(value, Mapping):
        return None
    fields = (value.get("policy_id"), value.get("policy_version"), value.get("config_digest"))
    return fields if all(isinstance(item, str) for item in fields) else None  # type: ignore[return-value]


def recorded_policies(
    payload: Mapping[str, Any],
) -> Iterator[tuple[Role, tuple[str, str, str], Mapping[str, Any]]]:
    """(role, identity, verdict) for the policy of a DECISION payload and each of its shadows."""
    identity = _identity(payload.get("policy"))
    if identity is not None:
        yield "active", identity, payload
    shadows = payload.get("shadow")
    if isinstance(shadows, list):
        for shadow in shadows:
            identity = _identity(shadow)
            if identity is not None:
                yield "shadow", identity, shadow


def policy_history(store: LedgerStore, *, tenant_id: str | None = None) -> PolicyHistory:
    """Every policy identity in the ledger's DECISIONs (``tenant_id``: that tenant's only)."""
    found: dict[tuple[Role, tuple[str, str, str]], PolicyVersion] = {}
    counts: dict[tuple[Role, tuple[str, str, str]], Counter[tuple[str, str]]] = {}
    total = 0
    statement = (
        select(index_column, events.c.created_at, events.c.payload)
        .where(events.c.kind == str(EventKind.DECISION))
        .order_by(index_column)
    )
    if tenant_id is not None:
        statement = statement.where(events.c.tenant_id == tenant_id)
    with store.read_connection("policy history") as conn:
        for row in conn.execution_options(yield_per=1000).execute(statement).mappings():
            payload = json.loads(row["payload"])
            if not isinstance(payload, dict):
                continue
            total += 1
            index, at = int(row["index"]), str(row["created_at"])
            for role, identity, verdict in recorded_policies(payload):
                key = (role, identity)
                entry = found.get(key)
                if entry is None:
                    entry = found[key] = PolicyVersion.first_seen(role, identity, row)
                    counts[key] = Counter()
                entry.decisions += 1
                entry.last_at, entry.last_index = at, index
                codes = verdict.get("reason_codes")
                for code in codes if isinstance(codes, list) else []:
                    counts[key][(str(verdict.get("decision")), str(code))] += 1
    for key, entry in found.items():
        for (decision, code), count in sorted(counts[key].items()):
            entry.reasons.setdefault(decision, {})[code] = count
    versions = sorted(found.values(), key=lambda v: (v.first_index, v.role, v.policy_id))
    return PolicyHistory(versions=versions, decisions=total)


def _like(fragment: str) -> str:
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def version_conflict(store: LedgerStore, policy: LoadedPolicy) -> PolicyVersion | None:
    """The first recorded use of ``policy``'s id and version with another config digest, if any.

    DECISION payloads are stored as canonical JSON (keys sorted, no spaces), so a policy
    identity is always the same text: the ledger is searched for it in SQL, and only rows that
    name the id and version are parsed.
    """
    tail = canonical_bytes({"policy_id": policy.policy_id, "policy_version": policy.policy_version})
    named = tail.decode("utf-8")[1:-1]  # '"policy_id":"x","policy_version":"1"'
    statement = (
        select(index_column, events.c.created_at, events.c.payload)
        .where(
            events.c.kind == str(EventKind.DECISION),
            events.c.payload.like(_like(named), escape="\\"),
        )
        .order_by(index_column)
    )
    wanted = (policy.policy_id, policy.policy_version)
    with store.read_connection("policy version check") as conn:
        for row in conn.execution_options(yield_per=1000).execute(statement).mappings():
            payload = json.loads(row["payload"])
            if not isinstance(payload, dict):
                continue
            for role, identity, _verdict in recorded_policies(payload):
                if identity[:2] == wanted and identity[2] != policy.config_digest:
                    return PolicyVersion.first_seen(role, identity, row)
    return None


def guard_policy_version(store: LedgerStore, policy: LoadedPolicy, *, refuse: bool = True) -> None:
    """Raise :class:`PolicyVersionConflictError` when ``policy`` reuses a recorded version
    (``refuse=False``: log a warning instead)."""
    clash = version_conflict(store, policy)
    if clash is not None:
        where = f"{policy.module}:{policy.object_name}" if policy.module else "the observer policy"
        message = (
            f"{where}: policy {policy.policy_id!r} version {policy.policy_version!r} "
            f"has config digest {policy.config_digest}, but the ledger recorded that id and version "
            f"with config digest {clash.config_digest} (first at index {clash.first_index}, "
            f"{clash.first_at}). A changed policy must change its version "
            "(or set TURNGATE_POLICY_VERSION_CHECK=warn to start anyway)"
        )
        if not refuse:
            log.warning("%s", message)
            return
        raise PolicyVersionConflictError(message)
