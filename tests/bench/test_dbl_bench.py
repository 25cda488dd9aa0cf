"""The side-by-side with the DBL gateway: its goals at, under and over their bounds, and the fake
provider both gateways call (the run itself installs a package from PyPI: it is run by hand,
``python -m bench.dbl``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from bench.dbl import compare, envelope, render
from bench.dbl_provider import MODEL, REPLY, app


def figures(p50: float, p99: float, throughput: float) -> dict[str, Any]:
    latency = {"p50": p50, "p99": p99}
    return {
        "sequential": {"latency_ms": latency},
        "concurrent": {"turns_per_s": throughput, "latency_ms": latency},
    }


@pytest.mark.parametrize(
    ("ours", "met"),
    [
        (figures(45.0, 99.0, 120.0), [True, True, True]),  # exactly 0.45x and 1.2x: met
        (figures(44.0, 50.0, 130.0), [True, True, True]),
        (figures(46.0, 100.0, 119.0), [False, False, False]),  # just over; an equal p99 is not lower
    ],
)
def test_goals_at_under_and_over_their_bounds(ours: dict[str, Any], met: list[bool]) -> None:
    result = compare(ours, figures(100.0, 100.0, 100.0))
    assert list(result["goals"].values()) == met
    assert result["figures"]["sequential_p50_ms"]["ratio"] == round(
        ours["sequential"]["latency_ms"]["p50"] / 100, 2
    )
    table = render(result)
    assert table.count("PASS") == sum(met) and table.count("MISS") == 3 - sum(met)


def test_one_envelope_for_both_gateways() -> None:
    body = envelope("th-1")
    inner = body["payload"]
    assert inner["requested_model_id"] == MODEL and inner["turn_id"] == body["correlation_id"]
    assert {"stream_id", "lane", "actor", "intent_type", "thread_id"} <= set(inner)


async def test_the_fake_provider_answers_streamed_and_whole() -> None:
    transport = httpx.ASGITransport(app=app(0.0))
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as http:
        ask = {"model": MODEL, "messages": [{"role": "user", "content": "one two"}]}
        whole = (await http.post("/api/chat", json=ask | {"stream": False})).json()
        assert whole["message"]["content"] == REPLY and whole["done"] is True
        assert whole["prompt_eval_count"] == 2
        lines = [json.loads(line) for line in (await http.post("/api/chat", json=ask)).text.splitlines()]
        assert "".join(line["message"]["content"] for line in lines) == REPLY
        assert [line["done"] for line in lines] == [False, True]
        assert (await http.get("/api/tags")).json()["models"][0]["name"] == MODEL
