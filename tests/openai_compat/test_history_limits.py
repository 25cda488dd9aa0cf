"""The per-call limits of ``/v1/chat/completions`` and the history index, at their boundaries.

Over HTTP: a real API (in process, a real SQLite ledger, a real Temporal dev server; no worker,
since every call here is refused before a turn starts), so the planning runs in the request CPU
pool's worker processes as in production. Calls whose history matches nothing are refused
400 ``openai.unmatched_history``: that answer shows a call got past the limit checked before.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.openai_compat.test_plan import THREAD, record_turn
from tests.stack import make_settings, running_stack
from turngate.api import cpu_pool
from turngate.api.openai_compat.history import HistoryMatch, HistoryMessage, event_fingerprint, match_history
from turngate.api.openai_compat.plan import check_message_count, plan_call
from turngate.core.events import AdmissionError, Event, EventKind
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.security.principal import DEV_PRINCIPAL
from turngate.settings import load_settings

CAP = 1024  # TURNGATE_OPENAI_MAX_MESSAGES's default
BODY_LIMIT = 8192


def _messages(count: int) -> list[dict[str, str]]:
    """``count`` messages: history that matches nothing, then the turn's user message."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"earlier {i}"} for i in range(count - 1)] + [
        {"role": "user", "content": "now"}
    ]


@pytest.fixture
async def http(tmp_path: Path, temporal_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(tmp_path, temporal_server.address, max_body_bytes=BODY_LIMIT)
    async with running_stack(settings, worker=False) as stack:
        stack.http.headers["X-Turngate-Thread"] = THREAD
        yield stack.http


def test_the_default_cap_is_documented() -> None:
    assert load_settings().openai_max_messages == CAP


@pytest.mark.parametrize("count", [CAP - 1, CAP])
def test_up_to_the_cap_the_messages_are_planned(count: int) -> None:
    check_message_count({"messages": _messages(count)}, CAP)


def test_one_over_the_cap_is_refused_before_validation() -> None:
    over = {"messages": [{"role": "nonsense"}] * (CAP + 1)}  # never validated
    with pytest.raises(AdmissionError) as caught:
        check_message_count(over, CAP)
    assert caught.value.reason_code == "openai.too_many_messages"
    assert caught.value.field == "messages" and f"at most {CAP}" in caught.value.detail


async def test_message_cap_over_http(tmp_path: Path, temporal_server: DevServer) -> None:
    settings = make_settings(tmp_path, temporal_server.address)  # the default body limit
    async with running_stack(settings, worker=False) as stack:
        headers = {"X-Turngate-Thread": THREAD}
        for count in (CAP - 1, CAP):
            resp = await stack.http.post(
                "/v1/chat/completions",
                json={"model": "echo-1", "messages": _messages(count)},
                headers=headers,
            )
            assert resp.status_code == 400, resp.text
            assert resp.json()["error"]["code"] == "openai.unmatched_history"
        resp = await stack.http.post(
            "/v1/chat/completions", json={"model": "echo-1", "messages": _messages(CAP + 1)}, headers=headers
        )
        assert resp.status_code == 413, resp.text
        error = resp.json()["error"]
        assert error["code"] == "openai.too_many_messages" and error["param"] == "messages"
        assert error["type"] == "invalid_request_error"
        # the gateway still answers: nothing was left running
        assert (await stack.http.get("/capabilities")).status_code == 200


def _body_of_bytes(size: int) -> bytes:
    """A call of exactly ``size`` bytes whose history is multibyte text (fewer characters than
    bytes) matching nothing."""
    history = "ž🙂" * 2000

    def body(text: str) -> bytes:
        messages = [{"role": "user", "content": text}, {"role": "user", "content": "now"}]
        return json.dumps({"model": "echo-1", "messages": messages}, ensure_ascii=False).encode("utf-8")

    text = history
    while len(body(text)) > size:
        text = text[:-1]
    text += "a" * (size - len(body(text)))
    assert len(body(text)) == size and len(text) < len(text.encode("utf-8"))
    return body(text)


@pytest.mark.parametrize(
    ("size", "status", "code"),
    [
        (BODY_LIMIT - 1, 400, "openai.unmatched_history"),
        (BODY_LIMIT, 400, "openai.unmatched_history"),
        (BODY_LIMIT + 1, 413, "admission.payload_too_large"),
    ],
)
async def test_body_limit_counts_bytes_of_multibyte_history(
    http: httpx.AsyncClient, size: int, status: int, code: str
) -> None:
    resp = await http.post(
        "/v1/chat/completions", content=_body_of_bytes(size), headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code


async def test_planning_in_a_worker_process_reads_the_thread(tmp_path: Path) -> None:
    """The worker opens the ledger by its URL and matches the history as the API process would;
    an in-memory ledger (one process only) is planned on a thread instead."""
    for url in (f"sqlite:///{tmp_path / 'ledger.sqlite3'}", "sqlite://"):
        settings = load_settings(ledger_url=url)
        with LedgerStore(url) as store:
            first = record_turn(store, "t1", "Labas! ąčę", "Puikiai 🙂")
            messages = [
                {"role": "user", "content": "Labas! ąčę"},
                {"role": "assistant", "content": "Puikiai 🙂"},
                {"role": "user", "content": "next"},
            ]
            body = json.dumps({"model": "echo-1", "messages": messages}).encode()
            chat, turn = await plan_call(body, {"X-Turngate-Thread": THREAD}, settings, store, DEV_PRINCIPAL)
            refs = [ref["ref_id"] for ref in turn.envelope["payload"]["declared_refs"]]
            assert refs == [first[0].digest, first[2].digest] and chat.model == "echo-1"
            with pytest.raises(AdmissionError) as caught:
                await plan_call(b'{"model": "echo-1", "messages": []}', {}, settings, store, DEV_PRINCIPAL)
            assert caught.value.reason_code == "admission.invalid_value"


async def test_one_key_holds_one_worker_process_at_a_time() -> None:
    """A key's second call waits for its first; another key's call does not wait for either."""
    per_key = cpu_pool._PerKey()
    entered: list[str] = []
    release = asyncio.Event()

    async def call(key: str, name: str) -> None:
        async with per_key.hold(key):
            entered.append(name)
            await release.wait()

    tasks = [asyncio.create_task(call(key, name)) for key, name in (("a", "a1"), ("a", "a2"), ("b", "b1"))]
    for _ in range(10):
        await asyncio.sleep(0)
    assert entered == ["a1", "b1"]  # a2 waits behind a1 only
    release.set()
    await asyncio.gather(*tasks)
    assert entered == ["a1", "b1", "a2"] and not per_key._gates  # nothing kept per key


# ------------------------------------------------------------------ the index


def _scan(history: list[HistoryMessage], events: list[Event]) -> HistoryMatch:
    """The matching rule, read literally: each message takes the first event of its kind and
    fingerprint after the previous match."""
    kinds = {"user": EventKind.INTENT, "tool": EventKind.INTENT, "assistant": EventKind.EXECUTION}
    ordered = sorted(events, key=lambda event: event.index)
    cursor, refs, unmatched, last = 0, [], [], None
    for message in history:
        wanted = (kinds[message.role], message.fingerprint())
        found = (
            i
            for i in range(cursor, len(ordered))
            if (ordered[i].kind, event_fingerprint(ordered[i])) == wanted
        )
        hit = next(found, None)
        if hit is None:
            unmatched.append(message)
            continue
        refs.append(ordered[hit].digest)
        last, cursor = ordered[hit].turn_id, hit + 1
    return HistoryMatch(ref_digests=tuple(refs), unmatched=tuple(unmatched), last_turn_id=last)


def test_the_index_matches_as_the_rule_says(store: LedgerStore) -> None:
    """Repeated texts, answers equal to questions, out-of-order histories: the index answers
    exactly what a scan of the thread per message answers."""
    words = ["a", "b", "c", "ą🙂"]
    rng = random.Random(7)
    events: list[Event] = []
    for n in range(40):
        events += record_turn(store, f"t{n}", rng.choice(words), rng.choice(words))
    roles: list[Any] = ["user", "assistant"]
    for _ in range(300):
        history = [
            HistoryMessage(i, rng.choice(roles), rng.choice(words)) for i in range(rng.randrange(0, 30))
        ]
        assert match_history(history, events) == _scan(history, events)
