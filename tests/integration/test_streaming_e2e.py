"""A turn streamed through the API's SSE endpoints, worker and API wired to the same token bus."""

from __future__ import annotations

import json

from tests.stack import envelope, make_settings, running_stack


async def read_sse(response) -> list[tuple[str, dict]]:
    events, kind = [], None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:") and kind:
            events.append((kind, json.loads(line[5:])))
            if kind in ("done", "redact", "error"):
                break
    return events


async def test_turn_streams_tokens_then_done(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=20, wait_timeout_s=2)
    async with running_stack(settings) as stack:
        body = envelope("stream these five words", correlation_id="c-s")
        async with stack.http.stream("POST", "/ingress/intent", params={"stream": "true"}, json=body) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = await read_sse(resp)
        tokens = [data["text"] for kind, data in events if kind == "token"]
        assert len(tokens) > 1  # streamed in pieces, not one blob
        assert "".join(tokens) == "echo: stream these five words"
        kind, done = events[-1]
        assert kind == "done" and done["correlation_id"] == "c-s"

        # A client that connects after the turn finished still gets the whole answer.
        async with stack.http.stream("GET", "/turns/c-s/stream") as late:
            replay = await read_sse(late)
        assert "".join(d["text"] for k, d in replay if k == "token") == "echo: stream these five words"
        assert replay[-1][0] == "done"
        missing = await stack.http.get("/turns/nope/stream")
        assert missing.status_code == 404 and missing.json()["reason_code"] == "turn.not_found"


async def test_an_unknown_turn_answers_404_at_once_without_a_stream_slot(tmp_path, temporal_server) -> None:
    # One stream slot per key and a wait timeout far past the client's: unknown ids answer 404
    # at once (they were held for the whole wait timeout), none of them keeps the slot that
    # /tail then takes, and a recorded turn still streams.
    settings = make_settings(tmp_path, temporal_server.address, wait_timeout_s=600, max_streams_per_key=1)
    async with running_stack(settings) as stack:
        for correlation_id in ("nope", "c-never", "nope"):
            missing = await stack.http.get(f"/turns/{correlation_id}/stream", timeout=20)
            assert missing.status_code == 404 and missing.json()["reason_code"] == "turn.not_found"
        async with stack.http.stream("GET", "/tail", params={"since": "-1"}, timeout=20) as tail:
            assert tail.status_code == 200
        done = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=envelope("hi", correlation_id="c-known")
        )
        assert done.status_code == 202, done.text
        async with stack.http.stream("GET", "/turns/c-known/stream", timeout=20) as known:
            assert known.status_code == 200
            assert (await read_sse(known))[-1][0] == "done"
