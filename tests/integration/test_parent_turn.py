"""`parent_turn_id` must name another turn already recorded in the thread: an unknown parent, a
parent in another thread and the turn itself are refused with 400 `admission.invalid_parent`,
and nothing is recorded or started."""

from __future__ import annotations

import pytest

from tests.stack import running_stack


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"parent_turn_id": "c-never"}, "parent_turn_id missing"),
        ({"parent_turn_id": "c-elsewhere"}, "parent_turn_id missing"),  # a turn of another thread
        ({"parent_turn_id": "c-new"}, "is the turn itself"),  # turn_id defaults to correlation_id
        ({"parent_turn_id": "turn-7", "turn_id": "turn-7"}, "is the turn itself"),
    ],
)
async def test_invalid_parent_is_refused_and_nothing_recorded(settings, payload, says) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("first", correlation_id="c-first", thread_id="t")
        await stack.chat("elsewhere", correlation_id="c-elsewhere", thread_id="other")
        before = (await stack.http.get("/snapshot")).json()["length"]
        resp = await stack.chat("next", correlation_id="c-new", thread_id="t", **payload)
        assert resp.status_code == 400, resp.text
        body = resp.json()
        assert body["reason_code"] == "admission.invalid_parent"
        assert body["field"] == "payload.parent_turn_id"
        assert says in body["detail"]
        after = (await stack.http.get("/snapshot")).json()
        assert after["length"] == before
        assert all(e["correlation_id"] != "c-new" for e in after["events"])


async def test_a_recorded_parent_of_the_thread_is_accepted(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("first", correlation_id="c-first", thread_id="t")
        resp = await stack.chat(
            "next",
            correlation_id="c-next",
            thread_id="t",
            parent_turn_id="c-first",
            declared_refs=[{"ref_type": "event", "ref_id": "c-first"}],
        )
        assert resp.status_code == 202, resp.text
        intent = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()["events"][3]
        assert (intent["kind"], intent["parent_turn_id"]) == ("INTENT", "c-first")
