"""Event digests recomputed from raw ledger rows, without a pydantic model per row.

:func:`turngate.core.events.event_digest` is the definition; this module only makes it cheap
to apply to millions of stored rows. It never copies the digest scope by hand: it *derives* it
by calling :func:`turngate.core.events.event_digest_scope` on probe drafts (unique values in
every :class:`~turngate.core.events.EventDraft` field) and recording which field, position
argument or payload form each scope key carries. A field added to the scope later (say
``tenant_id``) is picked up the same way; a scope this module cannot explain (a key whose
value is computed from a field) makes it fall back to ``event_digest_scope`` on a
``model_construct``-ed draft for every row, which is slower but still the definition.

The payload is parsed once with :func:`turngate.core.canonical.loads_plain`, which also tells
whether the C JSON encoder writes the scope canonically, so a row costs one ``json.loads``,
one ``json.dumps`` and one sha256, all in C.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from turngate.core.canonical import (
    CanonicalizationError,
    canonical_bytes,
    digest_bytes,
    loads_plain,
    plain_canonical_bytes,
)
from turngate.core.events import OBS_KEY, EventDraft, event_digest_scope, strip_obs

_SAFE_INT = 2**53 - 1
#: What a scope key may carry: ("field", name), ("index",), ("prev",), ("payload", stripped).
_Source = tuple[str, ...]


class UnreadableRow(ValueError):
    """A stored row whose digest cannot even be recomputed (payload is not a JSON object)."""


@dataclass(frozen=True)
class ScopePlan:
    """How to build an event's digest scope straight from its row: scope key -> source."""

    sources: tuple[tuple[str, _Source], ...]
    nullable: frozenset[str]  # EventDraft fields that may be None


def _probe_values(tag: str) -> dict[str, Any]:
    """A unique value per EventDraft field, and a payload with an ``_obs`` part to strip (and
    parts that only a different stripping rule would touch: another ``_`` key, a nested
    ``_obs``)."""
    values: dict[str, Any] = {name: f"\x00probe-{tag}-{name}" for name in EventDraft.model_fields}
    values["payload"] = {"_obs": {"probe": tag}, "_other": tag, f"probe-{tag}": [tag, {"_obs": tag}]}
    return values


def _explain(
    value: Any, probe: Mapping[str, Any], index: int, prev: str, payload_forms: Any
) -> _Source | None:
    if type(value) is int and value == index:
        return ("index",)
    if type(value) is str and value == prev:
        return ("prev",)
    for name, sent in probe.items():
        if name != "payload" and type(value) is str and value == sent:
            return ("field", name)
    for form, expected in payload_forms:
        if value == expected:
            return ("payload", form)
    return None


def derive_scope_plan() -> ScopePlan | None:
    """The scope of ``event_digest_scope`` as a plan, or None when it cannot be explained as a
    pure selection of fields, position, chain link and the payload (with or without ``_obs``).

    Probed three times (two sets of unique strings, then ``None`` in every field whose value may
    be None) so that a key which merely copies a field is told apart from one derived from it.
    """
    plans: list[dict[str, _Source]] = []
    for tag, index, prev in (("a", 987_654_321, "\x00prev-a"), ("b", 123_456_789, "\x00prev-b")):
        probe = _probe_values(tag)
        draft = EventDraft.model_construct(**probe)
        scope = event_digest_scope(draft, index, prev)
        forms = (("stripped", strip_obs(probe["payload"])), ("whole", probe["payload"]))
        plan: dict[str, _Source] = {}
        for key, value in scope.items():
            source = _explain(value, probe, index, prev, forms)
            if source is None:
                return None
            plan[key] = source
        plans.append(plan)
    if plans[0] != plans[1]:
        return None
    plan = plans[0]
    # None must pass through unchanged for the fields that may be None (a key computed as
    # `field or ""` would not); every other field is only ever given a string.
    nullable = {
        name for name, info in EventDraft.model_fields.items() if type(None) in get_args(info.annotation)
    }
    probe = _probe_values("c") | dict.fromkeys(nullable)
    scope = event_digest_scope(EventDraft.model_construct(**probe), 0, None)
    if set(scope) != set(plan):
        return None
    for key, source in plan.items():
        may_be_none = source == ("prev",) or (source[0] == "field" and source[1] in nullable)
        if may_be_none and scope[key] is not None:
            return None
    return ScopePlan(sources=tuple(plan.items()), nullable=frozenset(nullable))


_PLAN: ScopePlan | None = derive_scope_plan()


class RowDigester:
    """Recompute the digest of stored rows given as tuples in the order of ``columns``."""

    def __init__(self, columns: Sequence[str], plan: ScopePlan | None = _PLAN) -> None:
        self.columns = tuple(columns)
        position = {name: i for i, name in enumerate(self.columns)}
        self._index = position["index"]
        self._prev = position["prev_event_digest"]
        self._payload = position["payload"]
        # Fields the row supplies (a field without a column keeps its EventDraft default).
        self._field_positions = {
            name: position[name] for name in EventDraft.model_fields if name in position and name != "payload"
        }
        self._plan = self._compile(plan) if plan is not None else None

    def _compile(self, plan: ScopePlan) -> _Compiled | None:
        compiled = _Compiled()
        for key, source in plan.sources:
            if source[0] == "index":
                compiled.index_keys.append(key)
            elif source[0] == "prev":
                compiled.columns.append((key, self._prev, True))
            elif source[0] == "payload":
                compiled.payload_keys.append((key, source[1] == "stripped"))
            elif source[1] in self._field_positions:
                at = self._field_positions[source[1]]
                compiled.columns.append((key, at, source[1] in plan.nullable))
            else:
                info = EventDraft.model_fields[source[1]]
                if info.is_required():
                    return None  # the row lacks a required field: only the model path can say
                default = info.get_default(call_default_factory=True)
                if default is not None and type(default) is not str:
                    return None
                compiled.defaults[key] = default
        return compiled

    def digest(self, row: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """The recomputed digest of ``row`` and its parsed payload; raises :class:`UnreadableRow`.

        The payload is always serialized again from its parsed value (never hashed as stored
        text): a payload stored in a non-canonical spelling must not verify as if it were."""
        try:
            payload, plain = loads_plain(row[self._payload])
        except (TypeError, ValueError) as exc:
            raise UnreadableRow(f"payload is not valid JSON: {exc}") from exc
        if type(payload) is not dict:
            raise UnreadableRow("payload is not a JSON object")
        index = row[self._index]
        columns = self._columns(row, index) if self._plan is not None else None
        scope = self._scope(columns, payload) if plain and columns is not None else None
        try:
            if scope is None:
                draft = self._draft(row, payload)
                data = canonical_bytes(event_digest_scope(draft, int(index), row[self._prev]))
            else:
                data = plain_canonical_bytes(scope)
        except (CanonicalizationError, TypeError, ValueError) as exc:
            raise UnreadableRow(f"the stored event is not canonicalizable: {exc}") from exc
        return digest_bytes(data), payload

    def _columns(self, row: Sequence[Any], index: Any) -> dict[str, Any] | None:
        """The digest scope without its payload, built from the plan; None when a value is not
        plain (a tampered column type, an index outside the safe range): the model path judges
        those."""
        plan = self._plan
        assert plan is not None
        if type(index) is not int or not -_SAFE_INT <= index <= _SAFE_INT:
            return None
        scope: dict[str, Any] = {}
        for key, at, may_be_none in plan.columns:
            value = row[at]
            if type(value) is not str and (value is not None or not may_be_none):
                return None
            scope[key] = value
        scope.update(plan.defaults)
        for key in plan.index_keys:
            scope[key] = index
        return scope

    def _scope(self, columns: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
        plan = self._plan
        assert plan is not None
        scope = dict(columns)
        if plan.payload_keys:
            stripped = {k: v for k, v in payload.items() if k != OBS_KEY} if OBS_KEY in payload else payload
            for key, strip in plan.payload_keys:
                scope[key] = stripped if strip else payload
        return scope

    def _draft(self, row: Sequence[Any], payload: dict[str, Any]) -> EventDraft:
        # model_construct: no validation, so a tampered value (e.g. an unknown kind) still gets
        # digested, and then differs from the stored digest, instead of crashing the verifier.
        values = {name: row[at] for name, at in self._field_positions.items()}
        return EventDraft.model_construct(**values, payload=payload)


@dataclass
class _Compiled:
    # scope key, row position, whether None is a legitimate value there
    columns: list[tuple[str, int, bool]] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)  # fields the row has no column for
    index_keys: list[str] = field(default_factory=list)
    payload_keys: list[tuple[str, bool]] = field(default_factory=list)  # scope key, strip _obs
