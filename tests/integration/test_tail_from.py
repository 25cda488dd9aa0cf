"""`/tail` start positions on a real stack: `since` is the last index already seen (exclusive,
as the published DBL gateway and `Last-Event-ID`), `from` is the first index to send
(inclusive, "start from an index"). Checked at, just before and just after one index."""

from __future__ import annotations

import json

import pytest

from tests.stack import running_stack


async def _first_index(stack, params: dict[str, object], headers: dict[str, str] | None = None) -> int:
    async with stack.http.stream("GET", "/tail", params=params, headers=headers or {}) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                return int(json.loads(line[5:])["index"])
    raise AssertionError("the stream ended without an event")


async def test_since_is_exclusive_and_from_is_inclusive(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("first", correlation_id="c-1")
        await stack.chat("second", correlation_id="c-2")  # indexes 0..5
        for k in (2, 3, 4):
            assert await _first_index(stack, {"from": k}) == k
            assert await _first_index(stack, {"since": k}) == k + 1
        assert await _first_index(stack, {"from": 0}) == 0
        assert await _first_index(stack, {"since": -1}) == 0
        # Last-Event-ID (a reconnecting EventSource) resumes after it, whatever the query says.
        assert await _first_index(stack, {"from": 0}, {"Last-Event-ID": "3"}) == 4


@pytest.mark.parametrize(
    "params",
    [{"from": 3, "since": 2}, {"from": -1}, {"from": "x"}],
    ids=["both", "negative", "not-a-number"],
)
async def test_bad_start_positions_are_refused(settings, params) -> None:
    # Streamed: a wrongly accepted request must fail here, not hang as an open stream.
    async with (
        running_stack(settings, worker=False) as stack,
        stack.http.stream("GET", "/tail", params=params) as resp,
    ):
        status = resp.status_code
        body = json.loads(await resp.aread()) if status == 422 else None
    assert status == 422
    assert body is not None and body["reason_code"] == "request.invalid_parameter"
