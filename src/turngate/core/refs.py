"""Declared refs -> resolved refs (the context system).

A client names earlier events of its thread in ``INTENT.payload.declared_refs``; this module
turns them into :class:`ResolvedRef` records against a small set of candidate events that the
ledger fetched for exactly those ref ids (see :func:`ref_lookup_ids`). It never needs the whole
thread: resolution is one pass over the candidates plus one dictionary lookup per ref.

Lookup rules (documented in docs/CORE.md):

* ``ref_id`` in digest form (``sha256:<hex>``), any ``ref_type``: exactly the event with that
  digest, whatever its kind.
* ``ref_type == "event"`` (the default), ``ref_id`` = a correlation_id or turn_id: the turn, i.e.
  its INTENT and, under ``EXPAND_TURN_REFS``, also its EXECUTION (when recorded before the intent
  and ``allow_execution_refs_for_prompt``). Without that rule (context specs recorded before it):
  the INTENT only.
* ``ref_type == "execution"``, ``ref_id`` = a correlation_id or turn_id: the EXECUTION of that
  turn.
* Only events *before* the intent (``index < intent.index``) can be referenced.
* A match inside the intent's thread wins; if several events match, the lowest index wins.

Normalization steps run in this fixed order and each one that runs is named in
``Resolution.applied_rules``: ``SCOPE_BOUND`` (only when ``enforce_scope_bound``),
``EXPAND_TURN_REFS`` (only when the caller asks for it: context spec version 3),
``DEDUPE_REFS``, ``FILTER_INTENT_ONLY``, ``DROP_EXECUTION_REFS`` (only when
``allow_execution_refs_for_prompt`` is false) and ``SORT_CANONICAL``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from turngate.core.canonical import is_digest
from turngate.core.events import (
    EXTERNAL_REF_TYPES,
    REF_TYPE_CASE_QUERY,
    CaseQueryRef,
    DeclaredRef,
    Event,
    EventKind,
    ExternalRef,
    HandleRef,
)

if TYPE_CHECKING:
    from turngate.core.context import ContextSettings

# Error codes (the context system's failure modes, plus REF_INVALID for malformed entries).
REF_NOT_FOUND = "REF_NOT_FOUND"
CROSS_THREAD_REF = "CROSS_THREAD_REF"
MAX_REFS_EXCEEDED = "MAX_REFS_EXCEEDED"
EMPTY_REFS_DENIED = "EMPTY_REFS_DENIED"
REF_INVALID = "REF_INVALID"

# Normalization rules, in the order they are applied.
RULE_SCOPE_BOUND = "SCOPE_BOUND"
# An ``event`` ref to a turn admits its EXECUTION beside its INTENT (the context system's chat
# history example, written with turn or correlation ids only).
RULE_EXPAND_TURN_REFS = "EXPAND_TURN_REFS"
RULE_DEDUPE_REFS = "DEDUPE_REFS"
RULE_FILTER_INTENT_ONLY = "FILTER_INTENT_ONLY"
RULE_DROP_EXECUTION_REFS = "DROP_EXECUTION_REFS"
RULE_SORT_CANONICAL = "SORT_CANONICAL"

REF_TYPE_EVENT = "event"
REF_TYPE_EXECUTION = "execution"
SUPPORTED_REF_TYPES: frozenset[str] = frozenset({REF_TYPE_EVENT, REF_TYPE_EXECUTION})

AdmittedFor = Literal["governance", "execution_only"]
EventKindName = Literal["INTENT", "DECISION", "EXECUTION"]


class RefResolutionError(ValueError):
    """A declared ref cannot be admitted. ``code`` is one of the documented codes above."""

    def __init__(self, code: str, detail: str, ref_id: str | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.ref_id = ref_id

    def as_dict(self) -> dict[str, Any]:
        """The ``error`` object of a DENY DECISION."""
        return {"code": self.code, "detail": self.detail, "ref_id": self.ref_id}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ResolvedRef(_Frozen):
    """One admitted reference: which declared ref it came from and which event it pins."""

    ref_type: str
    ref_id: str
    event_index: int
    event_digest: str
    event_kind: EventKindName
    admitted_for: AdmittedFor


class DroppedRef(_Frozen):
    """A ref that resolved but was removed by a normalization rule (recorded, never silent)."""

    ref_type: str
    ref_id: str
    event_index: int
    event_digest: str
    event_kind: EventKindName
    rule: str
    reason: str


class Resolution(_Frozen):
    """The outcome of :func:`resolve_refs`. Every sequence is in canonical (event index) order."""

    resolved_refs: tuple[ResolvedRef, ...] = ()
    governance_events: tuple[Event, ...] = ()
    execution_events: tuple[Event, ...] = ()
    normative_input_digests: tuple[str, ...] = ()
    applied_rules: tuple[str, ...] = ()
    dropped_refs: tuple[DroppedRef, ...] = ()


def ref_lookup_ids(declared_refs: Sequence[object]) -> list[str]:
    """Distinct ref ids in declaration order: what the ledger must fetch candidates for.

    Takes what a client declared as it came (refs, external refs, raw mappings): external and
    malformed entries are skipped here (resolution reports the malformed ones as ``REF_INVALID``).
    """
    seen: dict[str, None] = {}
    for ref in declared_refs:
        if _is_external(ref):
            continue
        raw = (
            ref.ref_id
            if isinstance(ref, DeclaredRef)
            else (ref.get("ref_id") if isinstance(ref, Mapping) else None)
        )
        if isinstance(raw, str) and raw.strip():
            seen.setdefault(raw.strip(), None)
    return list(seen)


def _is_external(ref: object) -> bool:
    if type(ref) is dict:  # a stored ref, as parsed (the common case: no class checks)
        return ref.get("ref_type") in EXTERNAL_REF_TYPES
    if isinstance(ref, CaseQueryRef | HandleRef):
        return True
    return isinstance(ref, Mapping) and ref.get("ref_type") in EXTERNAL_REF_TYPES


def _raw_declared_refs(intent: Event) -> list[Any]:
    raw = intent.payload.get("declared_refs")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RefResolutionError(REF_INVALID, "payload.declared_refs must be a list")
    return raw


def declared_refs_of(intent: Event) -> list[dict[str, Any]]:
    """The raw ledger-event refs of an INTENT payload (``[]`` when absent). External refs
    (``case_query``, ``artifact.handle``) are not among them: see :func:`external_refs_of`."""
    return [ref for ref in _raw_declared_refs(intent) if not _is_external(ref)]


def external_refs_of(intent: Event) -> list[ExternalRef]:
    """The INTENT's ``case_query`` and ``artifact.handle`` refs, in declaration order (they were
    validated at admission; a malformed one here is ``REF_INVALID``)."""
    parsed: list[ExternalRef] = []
    for position, raw in enumerate(_raw_declared_refs(intent)):
        if not _is_external(raw):
            continue
        model = CaseQueryRef if raw["ref_type"] == REF_TYPE_CASE_QUERY else HandleRef
        try:
            parsed.append(model.model_validate(raw))
        except ValidationError as exc:
            detail = exc.errors(include_url=False)[0].get("msg")
            raise RefResolutionError(REF_INVALID, f"declared_refs[{position}]: {detail}") from exc
    return parsed


def parse_declared_refs(intent: Event) -> list[DeclaredRef]:
    """Validate every declared ref of ``intent`` (raises ``REF_INVALID``)."""
    parsed: list[DeclaredRef] = []
    for position, raw in enumerate(declared_refs_of(intent)):
        try:
            ref = DeclaredRef.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            raise RefResolutionError(
                REF_INVALID,
                f"declared_refs[{position}]{'.' + where if where else ''}: {first.get('msg')}",
            ) from exc
        if not is_digest(ref.ref_id) and ref.ref_type not in SUPPORTED_REF_TYPES:
            raise RefResolutionError(
                REF_INVALID,
                f"declared_refs[{position}]: ref_type {ref.ref_type!r} is not supported "
                f"(use one of {sorted(SUPPORTED_REF_TYPES)} or an event digest as ref_id)",
                ref.ref_id,
            )
        parsed.append(ref)
    return parsed


def declared_ref_sort_key(ref: DeclaredRef) -> tuple[str, str, str]:
    return (ref.ref_type, ref.ref_id, ref.version or "")


def applied_rules_for(settings: ContextSettings, *, turn_refs: bool = False) -> tuple[str, ...]:
    """The normalization steps :func:`resolve_refs` runs under ``settings``, in order
    (``turn_refs``: ``EXPAND_TURN_REFS`` runs)."""
    rules: list[str] = []
    if settings.enforce_scope_bound:
        rules.append(RULE_SCOPE_BOUND)
    if turn_refs:
        rules.append(RULE_EXPAND_TURN_REFS)
    rules += [RULE_DEDUPE_REFS, RULE_FILTER_INTENT_ONLY]
    if not settings.allow_execution_refs_for_prompt:
        rules.append(RULE_DROP_EXECUTION_REFS)
    rules.append(RULE_SORT_CANONICAL)
    return tuple(rules)


def _event_order(event: Event) -> tuple[int, str]:
    return (event.index, event.digest)


class _CandidateIndex:
    """Candidates keyed by every id a ref can use (correlation_id, turn_id, digest)."""

    def __init__(self, intent: Event, candidates: Sequence[Event]) -> None:
        self.thread_id = intent.thread_id
        self.by_id: dict[str, list[Event]] = {}
        for event in candidates:
            # Refs point to the past only: later events (and the intent itself) are invisible,
            # so a replay that sees more of the ledger resolves exactly the same way.
            if event.index >= intent.index or event.digest == intent.digest:
                continue
            for key in {event.correlation_id, event.turn_id, event.digest}:
                self.by_id.setdefault(key, []).append(event)

    def lookup(self, ref: DeclaredRef, settings: ContextSettings) -> Event:
        ref_id = ref.ref_id
        related = self.by_id.get(ref_id, [])
        wanted: Callable[[Event], bool]
        if is_digest(ref_id):
            what = "the event with this digest"

            def wanted(event: Event) -> bool:
                return event.digest == ref_id
        else:
            kind = EventKind.EXECUTION if ref.ref_type == REF_TYPE_EXECUTION else EventKind.INTENT
            what = f"the {kind} of turn {ref_id!r}"

            def wanted(event: Event) -> bool:
                return event.kind == kind and ref_id in (event.correlation_id, event.turn_id)

        in_thread = [event for event in related if event.thread_id == self.thread_id]
        matches = [event for event in in_thread if wanted(event)]
        if matches:
            return min(matches, key=_event_order)
        if in_thread:
            raise RefResolutionError(REF_NOT_FOUND, f"no earlier event in this thread is {what}", ref_id)
        if related:
            if settings.enforce_scope_bound:
                raise RefResolutionError(
                    CROSS_THREAD_REF,
                    f"ref {ref_id!r} names an event of another thread; refs must stay in "
                    f"thread {self.thread_id!r}",
                    ref_id,
                )
            matches = [event for event in related if wanted(event)]
            if matches:
                return min(matches, key=_event_order)
        raise RefResolutionError(REF_NOT_FOUND, f"no earlier event is {what}", ref_id)

    def execution_of(self, ref: DeclaredRef, asked: Event) -> Event | None:
        """The EXECUTION of the turn whose INTENT ``ref`` resolved to (``asked``), if one was
        recorded before the current intent. Only in the intent's own thread: the ledger hands
        over just one event per id of another thread, so a turn there is never expanded."""
        if asked.thread_id != self.thread_id:
            return None
        matches = [
            event
            for event in self.by_id.get(ref.ref_id, [])
            if event.kind == EventKind.EXECUTION
            and event.thread_id == asked.thread_id
            and event.turn_id == asked.turn_id
        ]
        return min(matches, key=_event_order) if matches else None


def resolve_refs(
    intent: Event, candidates: Sequence[Event], settings: ContextSettings, *, turn_refs: bool = False
) -> Resolution:
    """Resolve ``intent``'s declared refs against ``candidates`` (the context system).

    Raises :class:`RefResolutionError` with ``REF_INVALID``, ``EMPTY_REFS_DENIED``,
    ``MAX_REFS_EXCEEDED``, ``REF_NOT_FOUND`` or ``CROSS_THREAD_REF``. Declared refs are checked in
    canonical order, so the reported error does not depend on the client's order. ``turn_refs``:
    run ``EXPAND_TURN_REFS`` (context spec version 3; earlier versions resolve without it).
    """
    return resolve_declared_refs(intent, candidates, settings, turn_refs=turn_refs)[0]


def _empty_refs_denied(intent: Event, settings: ContextSettings) -> RefResolutionError | None:
    """``EMPTY_REFS_DENIED`` under ``empty_refs_policy: DENY``, unless the turn is a thread's
    first (no parent) and ``empty_refs_first_turn`` is ``ALLOW`` (the default)."""
    if settings.empty_refs_policy != "DENY":
        return None
    if intent.parent_turn_id is not None:
        return RefResolutionError(
            EMPTY_REFS_DENIED,
            "declared_refs is empty, but this turn continues the thread (parent_turn_id "
            "is set) and empty_refs_policy is DENY",
        )
    if settings.empty_refs_first_turn == "DENY":
        return RefResolutionError(
            EMPTY_REFS_DENIED,
            "declared_refs is empty and empty_refs_policy is DENY (empty_refs_first_turn is "
            "DENY: a thread's first turn is not exempt)",
        )
    return None


def resolve_declared_refs(
    intent: Event, candidates: Sequence[Event], settings: ContextSettings, *, turn_refs: bool = False
) -> tuple[Resolution, list[DeclaredRef]]:
    """:func:`resolve_refs`, and the declared ledger refs it parsed, in canonical order (every
    entry, duplicates kept): what the context spec pins, so they are parsed once."""
    if intent.kind != EventKind.INTENT:
        raise ValueError(f"resolve_refs needs an INTENT event, got {intent.kind}")
    raw_refs = declared_refs_of(intent)
    applied = applied_rules_for(settings, turn_refs=turn_refs)
    if not raw_refs:
        denied = _empty_refs_denied(intent, settings)
        if denied is not None:
            raise denied
        return Resolution(applied_rules=applied), []
    if len(raw_refs) > settings.max_refs:
        raise RefResolutionError(
            MAX_REFS_EXCEEDED,
            f"{len(raw_refs)} declared refs exceed max_refs={settings.max_refs}",
        )
    declared = sorted(parse_declared_refs(intent), key=declared_ref_sort_key)

    index = _CandidateIndex(intent, candidates)
    # DEDUPE_REFS: one entry per event; the smallest (ref_type, ref_id) names it, so the
    # result does not depend on the client's order.
    chosen: dict[str, tuple[DeclaredRef, Event]] = {}
    expand = turn_refs and settings.allow_execution_refs_for_prompt
    for ref in declared:
        event = index.lookup(ref, settings)
        chosen.setdefault(event.digest, (ref, event))
        if expand and ref.ref_type == REF_TYPE_EVENT and event.kind == EventKind.INTENT:
            # EXPAND_TURN_REFS: a ref by turn or correlation id names the whole turn; its
            # answer is admitted beside the question (execution_only, never governance).
            answer = None if is_digest(ref.ref_id) else index.execution_of(ref, event)
            if answer is not None:
                chosen.setdefault(answer.digest, (ref, answer))

    resolved: list[ResolvedRef] = []
    dropped: list[DroppedRef] = []
    governance: list[Event] = []
    execution: list[Event] = []
    # SORT_CANONICAL: event index ascending.
    for ref, event in sorted(chosen.values(), key=lambda pair: _event_order(pair[1])):
        kind: EventKindName = event.kind.value
        pin = {
            "ref_type": ref.ref_type,
            "ref_id": ref.ref_id,
            "event_index": event.index,
            "event_digest": event.digest,
            "event_kind": kind,
        }
        if event.kind == EventKind.INTENT:
            # FILTER_INTENT_ONLY: only INTENTs are admitted for governance.
            governance.append(event)
            resolved.append(ResolvedRef(**pin, admitted_for="governance"))
            continue
        if event.kind == EventKind.EXECUTION:
            if not settings.allow_execution_refs_for_prompt:
                dropped.append(
                    DroppedRef(
                        **pin,
                        rule=RULE_DROP_EXECUTION_REFS,
                        reason="allow_execution_refs_for_prompt is false",
                    )
                )
                continue
            execution.append(event)
        # EXECUTION and DECISION: audit trail and prompt material only, never governance.
        resolved.append(ResolvedRef(**pin, admitted_for="execution_only"))

    resolution = Resolution(
        resolved_refs=tuple(resolved),
        governance_events=tuple(governance),
        execution_events=tuple(execution),
        normative_input_digests=tuple(event.digest for event in governance),
        applied_rules=applied,
        dropped_refs=tuple(dropped),
    )
    return resolution, declared
