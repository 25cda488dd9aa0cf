"""The requests of the conformance corpus: what a client written for the published DBL gateway
(wire contract v3) sends, in the order it sends them. ``record.py`` runs them against that
gateway and writes ``corpus.json`` (these requests plus the answers it observed); the test reads
only ``corpus.json``.

A case: ``name``; ``request`` (method, path, params, headers, and ``json`` or raw ``content``);
``values`` / ``types``: dotted paths of the JSON answer whose value / JSON type is contractual
(the answer's top-level field names and types always are); ``turn``: also record the turn's
events from ``/snapshot`` (kinds in order, with ``event_values`` / ``event_types`` per kind);
``sse``: read ``take`` messages of an SSE stream, ids relative to ``base``; ``differs``: where
turngate deliberately answers otherwise, the docs section that says so and the expectations
that replace the recorded ones for turngate.
"""

from __future__ import annotations

import copy
from typing import Any

MODEL = "bench-model"  # the fake Ollama provider's model (bench/dbl_provider.py)

ACCEPTED = ["accepted", "stream_id", "correlation_id"]
# An ALLOW's reason codes are the policy module's own (the recording ran the published gateway's
# allow-all policy, the test turngate's); a DENY of the gateway's own checks is contractual.
TURN_EVENTS = {"DECISION": ["decision"]}
DENY_EVENTS = {"DECISION": ["decision", "reason_codes"]}
TURN_TYPES = {"EXECUTION": ["output_text"]}
REFUSAL_TYPES = ["detail"]


def envelope(
    name: str, *, thread: str = "th-{run}-a", message: str = "hello", **fields: Any
) -> dict[str, Any]:
    """The published gateway's minimal template (``GET /intent-template``), one turn per name."""
    payload: dict[str, Any] = {
        "stream_id": "default",
        "lane": "user_chat",
        "actor": "conformance",
        "intent_type": "chat.message",
        "thread_id": thread,
        "turn_id": f"turn-{name}",
        "requested_model_id": MODEL,
        "payload": {"message": message},
    }
    payload.update(fields)
    return {"interface_version": 3, "correlation_id": f"c-{{run}}-{name}", "payload": payload}


def post(body: dict[str, Any]) -> dict[str, Any]:
    return {"method": "POST", "path": "/ingress/intent", "json": body}


def get(path: str, **params: Any) -> dict[str, Any]:
    return {"method": "GET", "path": path, "params": params}


def turn(name: str, doc: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    case = {
        "name": name,
        "doc": doc,
        "request": post(body),
        "values": ACCEPTED,
        "types": ["index", "queued"],
        "turn": True,
        "event_values": TURN_EVENTS,
        "event_types": TURN_TYPES,
    }
    return case | extra


# The published gateway writes a PROOF (its context release guard) between DECISION and
# EXECUTION; turngate's ledger holds INTENT, DECISION and EXECUTION only.
NO_PROOF: dict[str, Any] = {
    "doc": "docs/LEDGER.md#schema-migrations-0001-0002",
    "note": "event kinds are INTENT, DECISION, EXECUTION: no PROOF event between DECISION and EXECUTION",
    "drop_event_kinds": ["PROOF"],
}

NOT_OFFERED: dict[str, Any] = {
    "doc": "docs/CONFORMANCE.md#routes-turngate-does-not-offer",
    "note": "not offered: 404 route.not_found (the thread's events are on /snapshot?thread_id=, "
    "the envelope is in docs/API.md, the routes in /openapi.json)",
    "expect": {"status": 404, "values": {"reason_code": "route.not_found"}},
}

REFUSED_422 = "docs/ERRORS.md#admission-codes-http-4xx-nothing-started-nothing-recorded"


def refused(name: str, doc: str, body: Any, *, code: str | None = None, status: int = 422) -> dict[str, Any]:
    """A bad envelope: the published gateway answers 400 ``{detail}``; turngate refuses it with
    422 and a reason code (and a ``detail``), as its error table lists."""
    request = post(body) if not isinstance(body, str) else {**post({}), "content": body}
    if isinstance(body, str):
        del request["json"]
    case: dict[str, Any] = {"name": name, "doc": doc, "request": request, "types": REFUSAL_TYPES}
    if code:
        case["differs"] = {
            "doc": REFUSED_422,
            "note": f"refused with {status} {code} (a stable reason code) where the published "
            "gateway says 400",
            "expect": {"status": status, "values": {"reason_code": code, "ok": False}},
        }
    return case


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    target = body
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return body


def _bad(name: str, **fields: Any) -> dict[str, Any]:
    return envelope(name, **fields)


CASES: list[dict[str, Any]] = [
    {
        "name": "healthz",
        "doc": "GET /healthz: liveness, no auth",
        "request": get("/healthz"),
        "values": [],
        "differs": {
            "doc": "docs/API.md#http-api",
            "note": "answers {ok, ledger, ...} (the ledger and Temporal checked) instead of {status: ok}",
            "expect": {"fields": {}},
        },
    },
    # ---------------------------------------------------------------- accepted turns
    turn(
        "chat_minimal",
        "the minimal template: 202 {accepted, stream_id, index, correlation_id, queued}; "
        "INTENT -> DECISION(ALLOW) -> EXECUTION with output_text",
        envelope("chat_minimal", message="What is 2+2?"),
        differs=NO_PROOF,
    ),
    turn(
        "example1_turn2",
        "the CONTEXT specification's Example 1: the second turn declares refs to the first turn "
        "by its correlation id and its turn id; both resolve, the turn is allowed",
        envelope(
            "example1_turn2",
            message="Explain more",
            parent_turn_id="turn-chat_minimal",
            declared_refs=[
                {"ref_type": "event", "ref_id": "c-{run}-chat_minimal"},
                {"ref_type": "event", "ref_id": "turn-chat_minimal"},
            ],
        ),
        event_values={
            "DECISION": ["decision", "context_spec.retrieval.resolved_refs[].admitted_for"],
        },
        differs=NO_PROOF
        | {
            "doc": "docs/CORE.md#the-context-systems-chat-history-example-as-written; "
            "docs/LEDGER.md#schema-migrations-0001-0002",
            "note": NO_PROOF["note"]
            + "; a ref naming a turn resolves to the whole turn (INTENT for governance, its "
            "EXECUTION execution_only), where the published gateway resolves both refs to INTENT-1",
            "event_values": {
                "DECISION": {
                    "context_spec.retrieval.resolved_refs[].admitted_for": ["governance", "execution_only"]
                }
            },
        },
    ),
    turn(
        "tools_and_budget",
        "v3 fields: declared_tools, tool_scope and budget within the limits are accepted",
        envelope(
            "tools_and_budget",
            declared_tools=["web.search"],
            tool_scope="strict",
            budget={"max_tokens": 2048, "max_duration_ms": 30000},
        ),
        differs=NO_PROOF,
    ),
    turn(
        "thread_defaults",
        "no thread_id: the published gateway takes the correlation id as the thread",
        _without(envelope("thread_defaults"), "payload", "thread_id"),
        differs=NO_PROOF,
    ),
    turn(
        "ref_not_found",
        "a declared ref that names nothing: a recorded DENY with REF_NOT_FOUND, no EXECUTION",
        envelope("ref_not_found", declared_refs=[{"ref_type": "event", "ref_id": "no-such-event-{run}"}]),
        event_values=DENY_EVENTS,
    ),
    turn(
        "ref_other_thread",
        "a ref to a turn of another thread is never admitted: a recorded DENY",
        envelope(
            "ref_other_thread",
            thread="th-{run}-b",
            declared_refs=[{"ref_type": "event", "ref_id": "c-{run}-chat_minimal"}],
        ),
        event_values=DENY_EVENTS,
        differs={
            "doc": "docs/CORE.md#reference-lookup-rules",
            "note": "the DENY says CROSS_THREAD_REF (the id exists, in another thread) where the "
            "published gateway says REF_NOT_FOUND",
            "event_values": {"DECISION": {"reason_codes": ["CROSS_THREAD_REF"]}},
        },
    ),
    turn(
        "too_many_refs",
        "more declared refs than the context config's max_refs (50): a recorded DENY",
        envelope(
            "too_many_refs",
            declared_refs=[{"ref_type": "event", "ref_id": f"r-{i}"} for i in range(51)],
        ),
        event_values=DENY_EVENTS,
    ),
    turn(
        "unknown_model",
        "a requested_model_id no provider offers",
        envelope("unknown_model", requested_model_id="no-such-model"),
        event_values=DENY_EVENTS,
        differs={
            "doc": "docs/ERRORS.md#policy-outcomes",
            "note": "a recorded DENY model.unavailable before anything runs, where the published "
            "gateway allows the turn and its EXECUTION fails",
            "expect": {
                "events": [
                    {"kind": "INTENT"},
                    {"kind": "DECISION", "decision": "DENY", "reason_codes": ["model.unavailable"]},
                ]
            },
        },
    ),
    turn(
        "outer_inputs",
        "v3 inputs beside the payload (principal_id, scalar extensions) are accepted",
        envelope("outer_inputs", inputs={"principal_id": "demo-user", "extensions": {"note": "x"}}),
        differs=NO_PROOF,
    ),
    # ---------------------------------------------------------------- refusals at admission
    {
        "name": "invalid_parent",
        "doc": "parent_turn_id names no turn of the thread: 400 admission.invalid_parent",
        "request": post(envelope("invalid_parent", parent_turn_id="no-such-turn-{run}")),
        "values": ["ok", "reason_code"],
        "types": REFUSAL_TYPES,
    },
    refused(
        "interface_v2",
        "interface_version 2 is refused",
        {**envelope("interface_v2"), "interface_version": 2},
        code="admission.unsupported_interface_version",
    ),
    refused(
        "no_correlation_id",
        "correlation_id is required",
        _without(envelope("no_correlation_id"), "correlation_id"),
        code="admission.missing_field",
    ),
    refused(
        "payload_not_object",
        "payload must be an object",
        {**envelope("payload_not_object"), "payload": "chat"},
        code="admission.invalid_type",
    ),
    refused(
        "refs_not_list",
        "declared_refs must be a list",
        _bad("refs_not_list", declared_refs={"ref_type": "event", "ref_id": "x"}),
        code="admission.invalid_type",
    ),
    refused(
        "budget_tokens_zero",
        "budget.max_tokens below 1",
        _bad("budget_tokens_zero", budget={"max_tokens": 0}),
        code="admission.invalid_value",
    ),
    refused(
        "budget_tokens_over",
        "budget.max_tokens above 1000000",
        _bad("budget_tokens_over", budget={"max_tokens": 1000001}),
        code="admission.invalid_value",
    ),
    refused(
        "budget_duration_under",
        "budget.max_duration_ms below 1000",
        _bad("budget_duration_under", budget={"max_duration_ms": 999}),
        code="admission.invalid_value",
    ),
    refused(
        "budget_float",
        "budget values are integers, not floats",
        _bad("budget_float", budget={"max_tokens": 4096.5}),
        code="admission.invalid_type",
    ),
    refused(
        "budget_empty",
        "a budget names at least one limit",
        _bad("budget_empty", budget={}),
        code="admission.invalid_value",
    ),
    refused(
        "tool_name_pattern",
        "a declared tool name outside ^[a-z][a-z0-9_.]{0,63}$",
        _bad("tool_name_pattern", declared_tools=["web.search", "INVALID"]),
        code="admission.invalid_value",
    ),
    refused(
        "tools_not_list",
        "declared_tools must be a list",
        _bad("tools_not_list", declared_tools="web.search"),
        code="admission.invalid_type",
    ),
    refused(
        "too_many_tools",
        "more than 20 declared tools",
        _bad("too_many_tools", declared_tools=[f"tool_{i}" for i in range(21)]),
        code="admission.too_many_tools",
    ),
    refused(
        "tool_scope_invalid",
        "tool_scope is strict or advisory",
        _bad("tool_scope_invalid", tool_scope="relaxed"),
        code="admission.invalid_value",
    ),
    {
        "name": "malformed_json",
        "doc": "a body that is not JSON",
        "request": {"method": "POST", "path": "/ingress/intent", "content": "{not json"},
        "types": REFUSAL_TYPES,
        "differs": {
            "doc": REFUSED_422,
            "note": "400 admission.malformed_json where the published gateway's framework says 422",
            "expect": {"status": 400, "values": {"reason_code": "admission.malformed_json"}},
        },
    },
    turn(
        "empty_message",
        "an empty message: the published gateway records the turn and its EXECUTION fails",
        envelope("empty_message", message=""),
        differs={
            "doc": REFUSED_422,
            "note": "refused at admission with 422 admission.empty_message; nothing is recorded",
            "expect": {"status": 422, "values": {"reason_code": "admission.empty_message"}, "events": None},
        },
    ),
    turn(
        "unknown_intent_type",
        "an intent type the gateway does not offer",
        envelope("unknown_intent_type", intent_type="bogus.type"),
        differs={
            "doc": REFUSED_422,
            "note": "refused at admission with 422 admission.unknown_intent_type; nothing is recorded",
            "expect": {
                "status": 422,
                "values": {"reason_code": "admission.unknown_intent_type"},
                "events": None,
            },
        },
    ),
    # ---------------------------------------------------------------- reads
    {
        "name": "snapshot_page",
        "doc": "GET /snapshot: {length, offset, limit, v_digest, events[]} and the event fields",
        "request": get("/snapshot", limit=2, offset="{index:example1_turn2}"),
        "values": ["limit", "events[].kind", "events[].correlation_id"],
        "types": [
            "length",
            "v_digest",
            "events[].index",
            "events[].kind",
            "events[].thread_id",
            "events[].turn_id",
            "events[].parent_turn_id",
            "events[].correlation_id",
            "events[].stream_id",
            "events[].lane",
            "events[].actor",
            "events[].intent_type",
            "events[].payload",
            "events[].digest",
            "events[].prev_event_digest",
        ],
    },
    {
        "name": "snapshot_genesis",
        "doc": "the ledger's first event (the recording and the test start on an empty ledger)",
        "request": get("/snapshot", limit=1, offset=0),
        "values": ["events[].index", "events[].kind"],
        "types": ["events[].prev_event_digest"],
        "differs": {
            "doc": "docs/LEDGER.md#events-and-digests",
            "note": "the first event's prev_event_digest is null, not a digest of zeros",
            "expect": {"types": {"events[].prev_event_digest": ["null"]}},
        },
    },
    {
        "name": "snapshot_stream_lane",
        "doc": "GET /snapshot filtered by stream_id and lane",
        "request": get("/snapshot", stream_id="default", lane="user_chat", limit=1),
        "values": ["limit", "events[].stream_id", "events[].lane"],
    },
    {
        "name": "snapshot_past_end",
        "doc": "an offset past the ledger's end: an empty page",
        "request": get("/snapshot", offset=100000),
        "values": ["offset", "events"],
    },
    {
        "name": "snapshot_limit_zero",
        "doc": "limit below 1 is refused",
        "request": get("/snapshot", limit=0),
        "differs": {
            "doc": REFUSED_422,
            "note": "the refusal is turngate's error body (detail a string, reason code "
            "request.invalid_parameter), not the framework's list of validation errors",
            "expect": {
                "fields": {"detail": "string"},
                "values": {"reason_code": "request.invalid_parameter"},
            },
        },
    },
    {
        "name": "snapshot_limit_over",
        "doc": "limit above 2000",
        "request": get("/snapshot", limit=2001),
        "differs": {
            "doc": "docs/API.md#http-api",
            "note": "a limit over 2000 is clamped to 2000 (200), not refused",
            "expect": {"status": 200, "values": {"limit": 2000}},
        },
        "values": ["limit"],
    },
    {
        "name": "tail_since",
        "doc": "GET /tail?since=k: SSE `id: <index>`, `event: envelope`, starting after k",
        "request": get("/tail", since="{index:chat_minimal}"),
        "sse": {"take": 2, "base": "{index:chat_minimal}"},
    },
    {
        "name": "tail_last_event_id",
        "doc": "a reconnecting client's Last-Event-ID: the stream resumes after it",
        "request": {
            "method": "GET",
            "path": "/tail",
            "params": {},
            "headers": {"Last-Event-ID": "{index:chat_minimal.DECISION}"},
        },
        "sse": {"take": 1, "base": "{index:chat_minimal.DECISION}"},
    },
    {
        "name": "tail_lanes",
        "doc": "GET /tail?lanes=: only those lanes",
        "request": get("/tail", since="{index:chat_minimal}", lanes="user_chat"),
        "sse": {"take": 1, "base": "{index:chat_minimal}"},
    },
    {
        "name": "capabilities",
        "doc": "GET /capabilities as chat clients read it (turngate: ?format=gateway.v1; the "
        "published gateway ignores the parameter)",
        "request": get("/capabilities", format="gateway.v1"),
        "values": [
            "schema_version",
            "interface_version",
            "providers[].models[].id",
            "surfaces.tail",
            "surfaces.snapshot",
            "surfaces.ingress_intent",
        ],
        "types": ["gateway_version", "providers", "surfaces"],
        "differs": {
            "doc": "docs/API.md#the-published-gateways-capabilities-shape",
            "note": "the gateway.capabilities.v1 document plus the live fields chat clients read: "
            "intents is the document's list; the published gateway's auth, boundary, budget, "
            "economic, tool_surface and surface_catalog are not carried; every provider is listed "
            "(echo, and none for one without credentials)",
            "expect": {
                "fields": {
                    "schema_version": "string",
                    "gateway_version": "string",
                    "interface_version": "integer",
                    "intents": "array",
                    "providers": "array",
                    "surfaces": "object",
                },
                "values": {"providers[].models[].id": [["echo-1"], [], [], [MODEL]]},
            },
        },
    },
    {
        "name": "tail_since_minus_one",
        "doc": "GET /tail?since=-1 (the published gateway's default): from the first event",
        "request": get("/tail", since=-1),
        "sse": {"take": 1},
    },
    {
        "name": "resubmit",
        "doc": "the same envelope (same correlation_id) sent again",
        "request": post(envelope("chat_minimal", message="What is 2+2?")),
        "values": ACCEPTED,
    },
    {
        "name": "wrong_method",
        "doc": "GET on the ingress route",
        "request": get("/ingress/intent"),
        "types": ["detail"],
    },
    {
        "name": "unknown_route",
        "doc": "a path that is no route",
        "request": get("/no-such-route"),
        "types": ["detail"],
    },
    {
        "name": "surfaces",
        "doc": "GET /surfaces: the published gateway's surface catalog",
        "request": get("/surfaces"),
        "differs": NOT_OFFERED,
    },
    {
        "name": "intent_template",
        "doc": "GET /intent-template: the published gateway's envelope examples",
        "request": get("/intent-template"),
        "differs": NOT_OFFERED,
    },
    {
        "name": "thread_timeline",
        "doc": "GET /threads/{id}/timeline: the published gateway's turns of a thread",
        "request": get("/threads/th-{run}-a/timeline"),
        "differs": NOT_OFFERED,
    },
    {
        "name": "status",
        "doc": "GET /status: a JSON object",
        "request": get("/status"),
        "differs": {
            "doc": "docs/API.md#http-api",
            "note": "turngate.status.2: ledger head, running turns, LLM queue, auth mode "
            "(the published gateway answers its runner phase {phase, runner_status, t_index, note})",
            "expect": {"fields": {}},
        },
    },
]
