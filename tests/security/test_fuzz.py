"""Property-based fuzzing of the HTTP API (bounded): schemathesis generates requests from the
app's own OpenAPI document for every operation, hypothesis generates intent envelopes (the
ingress reads its body itself, so the schema has none) and bodies nested up to 3,000 levels;
with and without a key.
No answer is a 5xx, and no partial record is left: every accepted intent has its DECISION,
nothing refused was recorded, and the ledger verifies.

`make test` draws fewer examples (every operation, shape and key still fuzzed); set
``TURNGATE_TEST_FUZZ=full`` for the full counts, as after a change to the API's surface."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.security.conftest import bearer, make_key
from tests.security.live import live_stack
from tests.security.test_no_5xx_shapes import tool_loop
from turngate.core.json_depth import MAX_JSON_DEPTH, json_depth
from turngate.ledger import LedgerStore
from turngate.settings import Settings

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is a dev dependency (pip install schemathesis)"
)

#: The web UI's JSON routes are fuzzed by their own test below (known failures there).
UI_PREFIX = "/ui/"
#: Endpoints whose answer is an endless or long-polling SSE stream: called once each below.
STREAMING = {"/tail", "/turns/{correlation_id}/stream"}
FULL = os.environ.get("TURNGATE_TEST_FUZZ") == "full"
EXAMPLES_PER_OPERATION = 25 if FULL else 12
ENVELOPE_EXAMPLES = 120 if FULL else 60
DEEP_EXAMPLES = 60 if FULL else 30

FUZZ = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
ids = st.text(min_size=1, max_size=30) | st.sampled_from(["c-1", "t", "default", " ", "sha256:" + "0" * 64])
envelopes = st.fixed_dictionaries(
    {"interface_version": st.sampled_from([3, 3, 3, 2, "3"]), "correlation_id": ids},
    optional={
        "payload": st.fixed_dictionaries(
            {"intent_type": st.sampled_from(["chat.message", "chat.message", "x"])},
            optional={
                "payload": st.fixed_dictionaries({"message": st.text(max_size=40) | json_value}),
                "thread_id": ids | json_value,
                "turn_id": ids,
                "parent_turn_id": ids,
                "declared_refs": st.lists(
                    st.fixed_dictionaries(
                        {"ref_id": ids}, optional={"ref_type": st.sampled_from(["event", "execution", "x"])}
                    )
                    | json_value,
                    max_size=4,
                ),
                "declared_tools": st.lists(st.text(max_size=10), max_size=3),
                "inputs": st.dictionaries(st.text(max_size=8), json_value, max_size=3),
                "budget": st.fixed_dictionaries(
                    {}, optional={"max_tokens": st.integers(), "max_duration_ms": st.integers()}
                ),
                "requested_model_id": st.text(max_size=10),
                "stream_id": ids,
            },
        ),
        "principal": json_value,
    },
)
#: Envelopes that pass admission (random messages, refs, inputs, a forged principal): turns run.
valid_envelopes = st.builds(
    lambda message, cid, refs, inputs, principal: {
        "interface_version": 3,
        "correlation_id": f"c-fuzz-{cid}",
        "principal": principal,
        "payload": {
            "intent_type": "chat.message",
            "declared_refs": [{"ref_type": "event", "ref_id": ref} for ref in refs],
            "inputs": inputs,
            "payload": {"message": message},
        },
    },
    st.text(min_size=1, max_size=60).filter(str.strip),
    st.uuids().map(lambda u: u.hex[:16]),
    st.lists(st.text(min_size=1, max_size=12).filter(str.strip), max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=8), json_value, max_size=3),
    json_value,
)


@st.composite
def deep_bodies(draw: st.DrawFn) -> tuple[bytes, int]:
    """A chat intent (or a bare value) whose nesting is drawn from 1 to 3,000 levels, containers
    chosen at random; written as text, since json.dumps itself recurses per level. Returns the
    body and its depth."""
    levels = draw(st.integers(1, 3000) | st.integers(MAX_JSON_DEPTH - 4, MAX_JSON_DEPTH + 2))
    kinds = draw(st.lists(st.booleans(), min_size=levels, max_size=levels))
    opening = "".join("[" if is_list else '{"k":' for is_list in kinds)
    closing = "".join("]" if is_list else "}" for is_list in reversed(kinds))
    value = f'{opening}"{draw(st.sampled_from(["", "[[", "}}"]))}"{closing}'
    if draw(st.booleans()):
        return value.encode(), levels
    cid = draw(st.uuids()).hex[:16]
    place = draw(st.sampled_from(["inputs", "message", "refs"]))
    inputs = f'{{"x":{value}}}' if place == "inputs" else "{}"
    message = value if place == "message" else '"m"'
    refs = f"[{value}]" if place == "refs" else "[]"
    extra = {"inputs": 1, "message": 0, "refs": 1}[place]
    body = (
        f'{{"interface_version":3,"correlation_id":"c-deep-{cid}","payload":{{"intent_type":"chat.message",'
        f'"inputs":{inputs},"declared_refs":{refs},"payload":{{"message":{message}}}}}}}'
    )
    return body.encode(), levels + 2 + extra + (1 if place == "message" else 0)


def _patiently(send: Callable[[], Any]) -> Any:
    """``send()`` again while the key's bucket is empty (429), after the ``Retry-After`` it says."""
    response = send()
    while response.status_code == 429:
        time.sleep(float(response.headers.get("Retry-After", "1")))
        response = send()
    return response


def _no_5xx(response: Any, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:300]}"


def _deep_envelope(levels: int) -> dict[str, Any]:
    value: Any = "bottom"
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return {
        "interface_version": 3,
        "correlation_id": f"c-schema-deep-{levels}",
        "payload": {"intent_type": "chat.message", "inputs": {"x": value}, "payload": {"message": "m"}},
    }


def _recorded_turn(response: Any) -> str | None:
    """The correlation id of the turn a generated request started (ingress 202 for a turn, or
    any answer of the OpenAI endpoint that names a turn), else None."""
    turn = response.headers.get("x-turngate-correlation-id")
    if turn is not None:
        return str(turn)
    if response.status_code == 202 and urlsplit(str(response.request.url)).path == "/ingress/intent":
        body = response.json()
        return None if "job_id" in body else str(body["correlation_id"])
    return None


def test_fuzz_the_api_finds_no_5xx_and_leaves_no_partial_records(secure_settings: Settings) -> None:
    key = make_key(secure_settings, "fuzz", "intent.write,snapshot.read")
    deep_key = make_key(secure_settings, "fuzz", "intent.write,snapshot.read")  # a bucket of its own
    operator = make_key(secure_settings, "*", "admin")
    accepted: set[str] = set()
    with live_stack(secure_settings) as base:
        raw = httpx.get(f"{base}/openapi.json").json()
        schema = schemathesis.openapi.from_dict(raw)
        fuzzed = []
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.path in STREAMING or operation.path.startswith(UI_PREFIX):
                continue
            fuzzed.append(f"{operation.method.upper()} {operation.path}")

            @FUZZ
            @given(case=operation.as_strategy())
            def check(case: Any) -> None:
                for headers in (bearer(key), bearer(operator), {}):
                    response = case.call(base_url=base, headers=headers, timeout=30)
                    _no_5xx(response, f"{case.method} {case.formatted_path}")
                    recorded_turn = _recorded_turn(response)
                    if recorded_turn is not None:
                        accepted.add(recorded_turn)

            check()
            if operation.path == "/ingress/intent":
                # The ingress reads its body itself, so the schema has none to generate from:
                # deep bodies are given explicitly (json.dumps in the client recurses too, so
                # 900 levels is as deep as a JSON body from schemathesis gets).
                for levels in (MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH - 2, 400, 900):
                    deep = operation.Case(body=_deep_envelope(levels), media_type="application/json")
                    response = _patiently(
                        lambda deep=deep: deep.call(base_url=base, headers=bearer(deep_key), timeout=30)
                    )
                    _no_5xx(response, f"{levels} levels in inputs")
                    if levels + 3 > MAX_JSON_DEPTH:
                        assert response.json()["reason_code"] == "admission.too_deep"
                    else:
                        assert response.status_code == 202, response.text
                        accepted.add(response.json()["correlation_id"])
        assert "POST /ingress/intent" in fuzzed and "GET /snapshot" in fuzzed

        with httpx.Client(base_url=base, timeout=30) as http:
            for path in ("/turns/%00/stream", "/turns/x/stream"):
                _no_5xx(http.get(path, headers=bearer(key)), path)
            for _attempt in range(10):
                with http.stream("GET", "/tail", params={"since": "-1"}, headers=bearer(key)) as tail:
                    if tail.status_code == 429 and b"rate.limited" in tail.read():
                        # the fuzz drained this key's bucket on purpose: wait for a token; any
                        # other refusal (a stream slot never given back) fails below
                        time.sleep(float(tail.headers.get("Retry-After", "1")))
                        continue
                    assert tail.status_code == 200, tail.read()
                    break
            else:
                raise AssertionError("/tail stayed rate limited")
            for bad in ("/tail?since=abc", "/tail?backlog=-1", "/snapshot?limit=99999"):
                _no_5xx(http.get(bad, headers=bearer(key)), bad)

            @settings(
                max_examples=ENVELOPE_EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(body=st.one_of(envelopes, valid_envelopes))
            def post(body: dict[str, Any]) -> None:
                response = http.post("/ingress/intent", json=body, headers=bearer(key))
                _no_5xx(response, json.dumps(body)[:200])
                if response.status_code == 202:
                    accepted.add(response.json()["correlation_id"])

            post()

            @settings(
                max_examples=DEEP_EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(drawn=deep_bodies())
            def post_deep(drawn: tuple[bytes, int]) -> None:
                body, depth = drawn
                assert json_depth(body) == depth
                response = _patiently(
                    lambda: http.post("/ingress/intent", content=body, headers=bearer(deep_key))
                )
                _no_5xx(response, f"{depth} levels: {body[:120]!r}")
                if depth > MAX_JSON_DEPTH:
                    assert response.status_code == 400, response.text
                    assert response.json()["reason_code"] == "admission.too_deep"
                elif response.status_code == 202:
                    accepted.add(response.json()["correlation_id"])

            post_deep()
            for raw_body in (b"", b"{", b"[]", b"\xff\xfe", b'{"interface_version": 3}' * 1000):
                _no_5xx(
                    http.post("/ingress/intent", content=raw_body, headers=bearer(key)), repr(raw_body[:20])
                )

            # No partial records: every accepted intent gets its DECISION; nothing else is recorded.
            deadline = time.monotonic() + 60
            while True:
                with LedgerStore(secure_settings.effective_ledger_url) as ledger:
                    _, events = ledger.snapshot(limit=1000)
                intents = {e.correlation_id for e in events if str(e.kind) == "INTENT"}
                decided = {e.correlation_id for e in events if str(e.kind) == "DECISION"}
                if intents <= decided or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert accepted, "the envelope strategy produced no valid intent"
            assert intents == accepted
            assert intents <= decided
            report = http.get("/verify", headers=bearer(operator)).json()
            assert report["ok"] is True, report["failures"][:5]


def test_fuzz_the_ui_routes_finds_no_5xx(secure_settings: Settings) -> None:
    key = make_key(secure_settings, "fuzz", "snapshot.read")
    with live_stack(secure_settings) as base:
        schema = schemathesis.openapi.from_dict(httpx.get(f"{base}/openapi.json").json())
        operations = [r.ok() for r in schema.get_all_operations() if r.ok().path.startswith(UI_PREFIX)]
        if not operations:
            pytest.skip("no web UI routes in this build")
        for operation in operations:

            @FUZZ
            @given(case=operation.as_strategy())
            def check(case: Any) -> None:
                _no_5xx(
                    case.call(base_url=base, headers=bearer(key), timeout=30),
                    f"{case.method} {case.formatted_path}",
                )

            check()


@st.composite
def tool_call_arguments(draw: st.DrawFn) -> tuple[str, int, bool]:
    """Tool-call arguments (JSON text inside the body's JSON string) nested from 1 to 3,000 levels,
    a leaf string that may hold a lone surrogate escape. Returns the text, its depth and whether
    a surrogate is unpaired."""
    levels = draw(st.integers(1, 3000) | st.integers(MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH + 2))
    escape = draw(st.sampled_from(["", "\\ud800", "\\udfff", "\\ud83d\\ude00", "\\ud83d"]))
    kinds = draw(st.lists(st.booleans(), min_size=levels - 1, max_size=levels - 1))
    opening = "".join("[" if is_list else '{"k":' for is_list in kinds)
    closing = "".join("]" if is_list else "}" for is_list in reversed(kinds))
    text = f'{{"a":{opening}"x{escape}"{closing}}}'
    return text, levels, escape in ("\\ud800", "\\udfff", "\\ud83d")


#: Zone offsets from -23:59 to +23:59, or none (a naive moment).
zones = st.none() | st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone).isoformat(),
    st.datetimes() | st.sampled_from([datetime.min, datetime.max]),
    zones,
)
SHAPES = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


def test_fuzz_json_inside_strings_and_moments_finds_no_5xx(secure_settings: Settings) -> None:
    # Shapes the schema cannot describe: JSON text inside a JSON string (tool-call arguments,
    # which the body's depth check never sees) and what-if moments naive or aware, near the ends
    # of the calendar.
    recording = secure_settings.model_copy(update={"openai_unmatched_history": "record"})
    key = make_key(recording, "fuzz", "intent.write,snapshot.read")
    operator = make_key(recording, "*", "admin")
    with live_stack(recording) as base, httpx.Client(base_url=base, timeout=30) as http:

        @settings(SHAPES, max_examples=DEEP_EXAMPLES)
        @given(drawn=tool_call_arguments())
        def post_arguments(drawn: tuple[str, int, bool]) -> None:
            arguments, levels, lone = drawn
            body = tool_loop(arguments)
            response = _patiently(lambda: http.post("/v1/chat/completions", json=body, headers=bearer(key)))
            _no_5xx(response, f"{levels} levels, lone surrogate {lone}: {arguments[:80]}")
            if levels > MAX_JSON_DEPTH:
                assert response.json()["error"]["code"] == "admission.too_deep", response.text
            elif lone:
                assert response.json()["error"]["code"] == "openai.invalid_tool_call", response.text

        post_arguments()

        @settings(SHAPES, max_examples=ENVELOPE_EXAMPLES)
        @given(since=st.none() | moments, until=st.none() | moments)
        def whatif(since: str | None, until: str | None) -> None:
            body = {"module": "turngate.policies.allow_all", "since": since, "until": until}
            response = _patiently(lambda: http.post("/policy/whatif", json=body, headers=bearer(operator)))
            _no_5xx(response, json.dumps(body))
            assert response.status_code in (200, 422), response.text
            if response.status_code == 422:
                assert response.json()["reason_code"] == "request.invalid_parameter"

        whatif()
