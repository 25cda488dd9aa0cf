"""The shape of what a client sends, through the HTTP API of a real stack: JSON nested deeper
than 64 levels (chat and job intents, raw brackets) is 400 ``admission.too_deep`` instead of a
500 or a reset; identifiers over 200 characters or with control characters are 422 with their own
reason codes instead of a misleading 503; refused requests record nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, running_stack
from turngate.core.events import MAX_ID_CHARS
from turngate.core.json_depth import MAX_JSON_DEPTH, json_depth
from turngate.settings import Settings

ID_FIELDS = ("thread_id", "turn_id", "stream_id", "lane", "actor")


def nested(levels: int) -> Any:
    """A value of ``levels`` nested containers (objects and arrays alternating)."""
    value: Any = "bottom"
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


def deep_intent(depth: int, cid: str) -> dict[str, Any]:
    """A chat intent whose whole body is ``depth`` levels deep (envelope 1, payload 2, inputs 3)."""
    body = envelope("deep", correlation_id=cid, inputs={"x": nested(depth - 3)})
    assert json_depth(json.dumps(body)) == depth
    return body


def test_the_depth_count_ignores_brackets_inside_strings() -> None:
    assert json_depth('{"a": "[[[[{{{{", "b": ["]]]]"]}') == 2
    assert json_depth(r'["\"[[[", [[]]]') == 3
    assert json_depth("42") == 0 and json_depth("[]") == 1
    assert json_depth("[" * 100_000) == 100_000


async def test_deep_nesting_is_refused_before_any_parse(secure_settings: Settings) -> None:
    key = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        http = stack.http

        async def post(body: bytes | dict[str, Any]) -> httpx.Response:
            if isinstance(body, dict):
                body = json.dumps(body).encode()
            return await http.post("/ingress/intent", content=body, headers=bearer(key))

        limits = (await http.get("/capabilities", headers=bearer(key))).json()["limits"]
        assert (limits["max_json_depth"], limits["max_id_chars"]) == (64, 200)
        at_limit = await post(deep_intent(MAX_JSON_DEPTH, "c-64"))
        assert at_limit.status_code == 202, at_limit.text
        attacks: list[bytes | dict[str, Any]] = [
            deep_intent(MAX_JSON_DEPTH + 1, "c-65"),
            envelope("deep", correlation_id="c-400", inputs=nested(400)),
            b"[" * 100_000,
            b'{"a":' * 50_000,
            {
                "interface_version": 3,
                "correlation_id": "c-job",
                "payload": {
                    "intent_type": "case.ingest",
                    "payload": {"case_id": "c", "documents": [{"name": "d", "text": "t"}], "x": nested(100)},
                },
            },
        ]
        for attack in attacks:
            resp = await post(attack)
            assert resp.status_code == 400, resp.text[:200]
            assert resp.json()["reason_code"] == "admission.too_deep"
        snap = (await http.get("/snapshot", headers=bearer(key))).json()
        assert {e["correlation_id"] for e in snap["events"]} == {"c-64"}  # refused: nothing recorded


@pytest.mark.parametrize("field", ID_FIELDS)
def test_every_id_field_is_limited(field: str) -> None:
    from turngate.core.events import AdmissionError, parse_intent

    def reason(value: str) -> str | None:
        try:
            parse_intent(envelope("m", correlation_id="c", **{field: value}))
        except AdmissionError as exc:
            return exc.reason_code
        return None

    assert reason("a" * MAX_ID_CHARS) is None
    assert reason("ä" * MAX_ID_CHARS) is None  # characters, not bytes (400 bytes in UTF-8)
    assert reason("a" * (MAX_ID_CHARS + 1)) == "admission.id_too_long"
    for control in ("\x00", "\r", "\n", "\x1b", "\x7f"):
        assert reason(f"a{control}b") == "admission.id_invalid_character"
    assert reason("thread\u00e9") is None and reason("threade\u0301") is None  # kept as sent, no NFC


async def test_long_and_control_character_ids_are_refused_over_http(secure_settings: Settings) -> None:
    key = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        http = stack.http

        async def post(cid: str, **payload: Any) -> httpx.Response:
            body = envelope("hi", correlation_id=cid, **payload)
            return await http.post("/ingress/intent", json=body, headers=bearer(key))

        huge = await post("c-huge", thread_id="t" * 100_000)  # answered 503 temporal.unavailable
        assert huge.status_code == 422 and huge.json()["reason_code"] == "admission.id_too_long"
        assert huge.json()["field"] == "payload.thread_id"
        for field in ID_FIELDS:
            resp = await post(f"c-nul-{field}", **{field: "a\x00b"})
            assert resp.status_code == 422, resp.text
            assert resp.json()["reason_code"] == "admission.id_invalid_character"
        crlf = await post("c-\r\nSet-Cookie: x")
        assert crlf.status_code == 422 and crlf.json()["reason_code"] == "admission.id_invalid_character"
        longest = await post("c" * MAX_ID_CHARS, thread_id="t" * MAX_ID_CHARS, turn_id="u" * MAX_ID_CHARS)
        assert longest.status_code == 202, longest.text
        snap = (await http.get("/snapshot", headers=bearer(key))).json()
        assert {e["correlation_id"] for e in snap["events"]} == {"c" * MAX_ID_CHARS}
