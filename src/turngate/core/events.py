"""Wire models: the intent envelope (DBL gateway interface_version 3) and ledger events.

An event's ``digest`` is sha256 over the canonical JSON of its digest scope (see
:func:`event_digest_scope`): identity columns, ``index``, ``prev_event_digest`` and the payload
without its ``_obs`` part. Timestamps and other observational data never enter a digest.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag, ValidationError
from pydantic_core import ErrorDetails

from turngate.core.canonical import canonical_bytes, digest_bytes
from turngate.core.json_depth import MAX_JSON_DEPTH, too_deep
from turngate.core.pointers import SERVER_OWNED_BODY_FIELDS

INTERFACE_VERSION = 3
KNOWN_INTENT_TYPES: frozenset[str] = frozenset({"chat.message"})
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
#: Admission caps on list sizes (a DoS guard; the context config's max_refs still decides).
DEFAULT_MAX_DECLARED_REFS = 256
DEFAULT_MAX_DECLARED_TOOLS = 20
OBS_KEY = "_obs"

NonEmptyStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
#: Longest identifier (correlation, thread, turn, stream id, lane, actor), in characters.
MAX_ID_CHARS = 200
#: No C0 control character (NUL, CR, LF, ...) nor DEL in an identifier: ids end up in log lines,
#: SSE fields, workflow ids and PostgreSQL text, which cannot hold NUL.
ID_PATTERN = r"^[^\x00-\x1f\x7f]*$"
#: An identifier as the client sent it, white space around it removed. Not NFC-normalised: ids
#: are compared as exact strings (two spellings of one name are two ids) and recorded as sent.
IdStr = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)
]
_ID_FIELDS = frozenset({"correlation_id", "thread_id", "turn_id", "stream_id", "lane", "actor"})
ToolName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.]{0,63}$")]


class EventKind(StrEnum):
    INTENT = "INTENT"
    DECISION = "DECISION"
    EXECUTION = "EXECUTION"


class AdmissionError(ValueError):
    """Bad input at the boundary. ``reason_code`` is stable and documented (docs/ERRORS.md)."""

    def __init__(self, reason_code: str, detail: str, field: str | None = None) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail
        self.field = field

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "reason_code": self.reason_code, "detail": self.detail}
        if self.field:
            body["field"] = self.field
        return body


# --------------------------------------------------------------------------- intent envelope


class _Strict(BaseModel):
    # strict: "5" is not an int and 5 is not a string; unknown fields are ignored (DBL clients
    # send extras such as tool_scope) and never recorded.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class DeclaredRef(_Strict):
    """A ref to an earlier ledger event of the thread (resolved in the workflow)."""

    ref_type: NonEmptyStr = "event"
    ref_id: NonEmptyStr
    version: str | None = None


REF_TYPE_CASE_QUERY = "case_query"
REF_TYPE_HANDLE = "artifact.handle"
#: Refs whose content comes from outside the ledger (a case index, a Workbench resolver): an
#: activity resolves them, their content is admitted ``execution_only`` (docs/CONTEXT.md).
EXTERNAL_REF_TYPES: frozenset[str] = frozenset({REF_TYPE_CASE_QUERY, REF_TYPE_HANDLE})


class CaseQueryRef(_Strict):
    """Retrieval the client asks for: top ``top_k`` chunks of a case for ``query``, against a
    pinned index version (``None``: the case's latest, pinned and recorded at resolution)."""

    ref_type: Literal["case_query"] = "case_query"
    case_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    query: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    top_k: Annotated[int, Field(ge=1, le=50)] = 5
    index_version: NonEmptyStr | None = None
    min_score: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0


class HandleRef(_Strict):
    """A Workbench handle whose text may be fetched (off by default, docs/SECURITY.md)."""

    ref_type: Literal["artifact.handle"] = "artifact.handle"
    ref_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=512)]
    kind: NonEmptyStr


def _ref_tag(value: Any) -> str:
    ref_type = value.get("ref_type") if isinstance(value, dict) else getattr(value, "ref_type", None)
    return ref_type if ref_type in EXTERNAL_REF_TYPES else "event"


AnyDeclaredRef = Annotated[
    Annotated[DeclaredRef, Tag("event")]
    | Annotated[CaseQueryRef, Tag(REF_TYPE_CASE_QUERY)]
    | Annotated[HandleRef, Tag(REF_TYPE_HANDLE)],
    Discriminator(_ref_tag),
]
ExternalRef = CaseQueryRef | HandleRef


class Budget(_Strict):
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    max_duration_ms: Annotated[int, Field(ge=1000, le=300_000)] | None = None


class IntentBody(_Strict):
    """``payload.payload``: what the user says."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    message: NonEmptyStr


class IntentPayload(_Strict):
    stream_id: IdStr = "default"
    lane: IdStr = "user_chat"
    actor: IdStr = "user"
    intent_type: NonEmptyStr
    thread_id: IdStr | None = None
    turn_id: IdStr | None = None
    parent_turn_id: NonEmptyStr | None = None
    requested_model_id: NonEmptyStr | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    declared_refs: list[AnyDeclaredRef] = Field(default_factory=list)
    declared_tools: list[ToolName] = Field(default_factory=list)
    budget: Budget | None = None
    payload: IntentBody


class IntentPrincipal(_Strict):
    """Who declared the intent, as the gateway authenticated it (never the secret itself).

    Set by the API from the caller's credentials, never taken from the request body; recorded in
    the INTENT's payload (so inside its digest and its identity) and as the events' tenant.
    """

    tenant_id: NonEmptyStr | None = None  # None: an unscoped (operator) key
    key_id: str | None = None


#: Envelope fields only the gateway sets: dropped from a client's body before validation.
SERVER_OWNED_FIELDS: tuple[str, ...] = ("principal", "offloaded")


class IntentEnvelope(_Strict):
    interface_version: Literal[3]
    correlation_id: IdStr
    payload: IntentPayload
    principal: IntentPrincipal | None = None
    #: Body fields the gateway moved to the artifact store because the INTENT would not fit the
    #: event payload limit: ``{"payload.payload.<name>": ArtifactPointer}``. Set by the API only
    #: (never taken from a request body), so these pointers are server-written (docs/ARTIFACTS.md).
    offloaded: dict[str, dict[str, Any]] | None = None

    @property
    def thread_id(self) -> str:
        return self.payload.thread_id or self.correlation_id

    @property
    def turn_id(self) -> str:
        return self.payload.turn_id or self.correlation_id

    @property
    def message(self) -> str:
        return self.payload.payload.message

    @property
    def tenant_id(self) -> str | None:
        return self.principal.tenant_id if self.principal else None

    def intent_event_payload(self) -> dict[str, Any]:
        """The INTENT event's payload: everything the client declared except identity columns,
        plus the authenticated principal (absent for unauthenticated intents)."""
        p = self.payload
        body: dict[str, Any] = {
            "interface_version": self.interface_version,
            "requested_model_id": p.requested_model_id,
            "inputs": p.inputs,
            "declared_refs": [r.model_dump(mode="json", exclude_none=True) for r in p.declared_refs],
            "declared_tools": list(p.declared_tools),
            "budget": p.budget.model_dump(mode="json", exclude_none=True) if p.budget else None,
            "payload": p.payload.model_dump(mode="json"),
        }
        if self.principal is not None:
            body["principal"] = self.principal.model_dump(mode="json")
        if self.offloaded:
            body["offloaded"] = dict(self.offloaded)
        return body

    def draft(self) -> EventDraft:
        """The INTENT event this envelope becomes."""
        p = self.payload
        return EventDraft(
            kind=EventKind.INTENT,
            thread_id=self.thread_id,
            turn_id=self.turn_id,
            parent_turn_id=p.parent_turn_id,
            correlation_id=self.correlation_id,
            stream_id=p.stream_id,
            lane=p.lane,
            actor=p.actor,
            intent_type=p.intent_type,
            payload=self.intent_event_payload(),
            tenant_id=self.tenant_id,
        )


_TYPE_ERRORS = ("_type", "_parsing", "model_attributes_type", "is_instance_of")


def _reason_for(error: ErrorDetails) -> str:
    kind = str(error.get("type", ""))
    loc = tuple(str(part) for part in error.get("loc", ()))
    if kind == "missing":
        return "admission.missing_field"
    if loc == ("interface_version",) and kind == "literal_error":
        return "admission.unsupported_interface_version"
    if loc[-2:] == ("payload", "message") and kind == "string_too_short":
        return "admission.empty_message"
    if loc and loc[-1] in _ID_FIELDS and kind == "string_too_long":
        return "admission.id_too_long"
    if loc and loc[-1] in _ID_FIELDS and kind == "string_pattern_mismatch":
        return "admission.id_invalid_character"
    if any(kind.endswith(suffix) for suffix in _TYPE_ERRORS):
        return "admission.invalid_type"
    return "admission.invalid_value"


def check_json_depth(body: bytes | str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a body nested deeper than ``limit`` before anything parses it (400)."""
    if too_deep(body, limit):
        raise AdmissionError(
            "admission.too_deep", f"the body nests objects and arrays deeper than {limit} levels"
        )


def parse_intent(
    raw: bytes | str | dict[str, Any],
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    known_intent_types: frozenset[str] = KNOWN_INTENT_TYPES,
    max_refs: int = DEFAULT_MAX_DECLARED_REFS,
    max_tools: int = DEFAULT_MAX_DECLARED_TOOLS,
) -> IntentEnvelope:
    """Parse and validate an intent envelope, raising :class:`AdmissionError` on bad input."""
    if isinstance(raw, bytes | str):
        check_json_depth(raw)
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise AdmissionError("admission.malformed_json", f"body is not valid JSON: {exc}") from exc
    else:
        data = raw
    if not isinstance(data, dict):
        raise AdmissionError("admission.invalid_type", "the envelope must be a JSON object")
    data = {key: value for key, value in data.items() if key not in SERVER_OWNED_FIELDS}
    _refuse_server_owned_body_fields(data)
    try:
        envelope = IntentEnvelope.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise AdmissionError(_reason_for(first), f"{where}: {first.get('msg')}", where) from exc
    _check_v3_tool_fields(data["payload"])
    if envelope.payload.intent_type not in known_intent_types:
        raise AdmissionError(
            "admission.unknown_intent_type",
            f"intent_type {envelope.payload.intent_type!r} is not one of {sorted(known_intent_types)}",
            "payload.intent_type",
        )
    _check_count("declared_refs", len(envelope.payload.declared_refs), max_refs, "admission.too_many_refs")
    _check_count(
        "declared_tools", len(envelope.payload.declared_tools), max_tools, "admission.too_many_tools"
    )
    size = len(envelope.message.encode("utf-8"))
    if size > max_message_bytes:
        raise AdmissionError(
            "admission.payload_too_large",
            f"message is {size} bytes; the limit is {max_message_bytes}",
            "payload.payload.message",
        )
    try:
        canonical = canonical_bytes(envelope.intent_event_payload())
        # What is stored must read back as itself: e.g. the float 1e16 is written as the digits
        # 10000000000000000, which read back as an integer beyond the RFC 8785 safe range.
        if canonical_bytes(json.loads(canonical)) != canonical:
            raise ValueError("a number does not read back as itself from canonical JSON")
    except ValueError as exc:
        raise AdmissionError("admission.invalid_value", f"{exc} (send such numbers as strings)") from exc
    return envelope


TOOL_SCOPES = ("strict", "advisory")


def _check_v3_tool_fields(payload: dict[str, Any]) -> None:
    """Wire contract v3's ``budget`` names at least one limit, and ``tool_scope`` (accepted, not
    recorded) is ``strict`` or ``advisory``; checked at admission only, so recorded histories
    that replay an envelope never meet it."""
    budget = payload.get("budget")
    limits = ("max_tokens", "max_duration_ms")
    if isinstance(budget, dict) and all(budget.get(limit) is None for limit in limits):
        raise AdmissionError(
            "admission.invalid_value", "budget must name max_tokens or max_duration_ms", "payload.budget"
        )
    scope = payload.get("tool_scope")
    if scope is None:
        return
    if not isinstance(scope, str):
        raise AdmissionError("admission.invalid_type", "tool_scope must be a string", "payload.tool_scope")
    if scope not in TOOL_SCOPES:
        raise AdmissionError(
            "admission.invalid_value", f"tool_scope must be one of {list(TOOL_SCOPES)}", "payload.tool_scope"
        )


def _refuse_server_owned_body_fields(data: dict[str, Any]) -> None:
    """A client's ``payload.payload`` may carry extra fields, but not the ones the gateway sets
    (the pointer of an offloaded message): those would be read back as the gateway's own."""
    body = data.get("payload")
    body = body.get("payload") if isinstance(body, dict) else None
    if not isinstance(body, dict):
        return
    for name in SERVER_OWNED_BODY_FIELDS:
        if name in body:
            raise AdmissionError(
                "admission.server_owned_field",
                f"payload.payload.{name} is set by the gateway, never by a client",
                f"payload.payload.{name}",
            )


def _check_count(name: str, count: int, limit: int, reason_code: str) -> None:
    if count > limit:
        raise AdmissionError(reason_code, f"{count} {name}; the limit is {limit}", f"payload.{name}")


# --------------------------------------------------------------------------- ledger events


class EventDraft(BaseModel):
    """An event before the ledger gives it a position (index, prev_event_digest, digest)."""

    model_config = ConfigDict(frozen=True)

    kind: EventKind
    thread_id: str
    turn_id: str
    parent_turn_id: str | None = None
    correlation_id: str
    stream_id: str = "default"
    lane: str = "user_chat"
    actor: str = "user"
    intent_type: str = "chat.message"
    payload: dict[str, Any] = Field(default_factory=dict)
    # The tenant of the turn (from its INTENT's principal; None when unauthenticated). Not in the
    # digest scope itself: the INTENT's ``payload.principal`` carries it into the digests.
    tenant_id: str | None = None

    @classmethod
    def following(cls, intent: EventDraft, kind: EventKind, payload: dict[str, Any]) -> EventDraft:
        """The turn's next event (its DECISION or EXECUTION): the INTENT's identity and tenant,
        its own kind and payload."""
        return cls(
            kind=kind,
            thread_id=intent.thread_id,
            turn_id=intent.turn_id,
            parent_turn_id=intent.parent_turn_id,
            correlation_id=intent.correlation_id,
            stream_id=intent.stream_id,
            lane=intent.lane,
            actor=intent.actor,
            intent_type=intent.intent_type,
            payload=payload,
            tenant_id=intent.tenant_id,
        )


class Event(EventDraft):
    """A recorded ledger event. ``created_at`` is observational (outside every digest)."""

    index: int
    digest: str
    prev_event_digest: str | None = None
    created_at: str | None = None

    @property
    def is_authoritative(self) -> bool:
        # Only DECISION events are normative (the gateway model).
        return self.kind == EventKind.DECISION

    def to_wire(self) -> dict[str, Any]:
        """The DBL-compatible event record served by /snapshot and /tail."""
        record = self.model_dump(mode="json")
        record["canon_len"] = len(
            canonical_bytes(event_digest_scope(self, self.index, self.prev_event_digest))
        )
        record["is_authoritative"] = self.is_authoritative
        return record


def strip_obs(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload without its observational ``_obs`` part."""
    return {k: v for k, v in payload.items() if k != OBS_KEY}


def event_digest_scope(draft: EventDraft, index: int, prev_event_digest: str | None) -> dict[str, Any]:
    """What an event's digest covers: position, chain link, identity, payload minus ``_obs``."""
    return {
        "index": index,
        "prev_event_digest": prev_event_digest,
        "kind": str(draft.kind),
        "thread_id": draft.thread_id,
        "turn_id": draft.turn_id,
        "parent_turn_id": draft.parent_turn_id,
        "correlation_id": draft.correlation_id,
        "stream_id": draft.stream_id,
        "lane": draft.lane,
        "actor": draft.actor,
        "intent_type": draft.intent_type,
        "payload": strip_obs(draft.payload),
    }


def event_digest(draft: EventDraft, index: int, prev_event_digest: str | None) -> str:
    return digest_bytes(canonical_bytes(event_digest_scope(draft, index, prev_event_digest)))


def seal(
    draft: EventDraft, index: int, prev_event_digest: str | None, created_at: str | None = None
) -> Event:
    """Give a draft its ledger position and digest."""
    return Event(
        **draft.model_dump(),
        index=index,
        prev_event_digest=prev_event_digest,
        digest=event_digest(draft, index, prev_event_digest),
        created_at=created_at,
    )
