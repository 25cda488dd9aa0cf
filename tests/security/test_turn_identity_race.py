"""Two tenants race on the same thread and turn ids while the worker is paused.

The API's admission check reads the ledger, which holds nothing until the worker records the
INTENT: with the one `turngate worker` process stopped (SIGSTOP, as a GC pause, CPU starvation
or a backlog would), both tenants' requests pass it. A turn's identity includes its tenant (the
workflow id, the API's wait, dedupe), and the ledger claims a thread for the first tenant it
records there: exactly one tenant's turn runs, the other gets 409
``admission.correlation_conflict``, and neither ever sees the other's message or answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import spawn
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore
from turngate.settings import Settings
from turngate.temporal_client import connect
from turngate.worker.pollers import polling_pids

ROLES = "intent.write,snapshot.read"
THREAD, TURN = "shared-thread", "shared-turn"
TENANTS = ("alice", "bob")
MESSAGES = {"alice": "alice's private question", "bob": "bob's attempt at the same ids"}
#: How long the worker stays stopped with both requests waiting.
PAUSE_S = 3.0


async def _started(client: Any, query: str) -> bool:
    return [w async for w in client.list_workflows(query)] != []


@contextlib.asynccontextmanager
async def paused_worker_stack(tmp_path: Path, temporal_server: Any) -> AsyncIterator[Race]:
    """A stack whose one worker is a real `turngate worker` process (``race.paused()`` stops it
    with SIGSTOP), and a key for each of two tenants."""
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys", wait_timeout_s=30.0)
    keys = {tenant: await asyncio.to_thread(make_key, settings, tenant, ROLES) for tenant in TENANTS}
    worker = spawn(["worker"], settings, tmp_path / "worker.log")
    client = await connect(settings)
    try:
        for _ in range(600):
            if worker.pid in await polling_pids(client, settings.turns_task_queue):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the worker never polled")
        async with running_stack(settings, worker=False) as stack:
            yield Race(settings, stack.http, keys, worker, client)
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.terminate()
            worker.wait(30)


@dataclass
class Race:
    settings: Settings
    http: httpx.AsyncClient
    keys: dict[str, str]
    worker: subprocess.Popen[bytes]
    client: Any

    async def run(
        self, first: str, send: Callable[[str], Awaitable[tuple[int, str]]]
    ) -> dict[str, tuple[int, str]]:
        """``send(first)``, and once its turn is started (nothing recorded: the worker is
        stopped), ``send`` of the other tenant; the worker resumes after ``PAUSE_S``."""
        second = next(t for t in TENANTS if t != first)
        os.kill(self.worker.pid, signal.SIGSTOP)
        try:
            sent = {first: asyncio.create_task(send(first))}
            query = f"WorkflowId STARTS_WITH '{self.settings.workflow_id_prefix}/'"
            for _ in range(100):
                if await _started(self.client, query):
                    break
                await asyncio.sleep(0.05)
            sent[second] = asyncio.create_task(send(second))
            await asyncio.sleep(PAUSE_S)
        finally:
            os.kill(self.worker.pid, signal.SIGCONT)
        return {tenant: await task for tenant, task in sent.items()}

    def check_ledger(self, winner: str, loser: str) -> None:
        with LedgerStore(self.settings.effective_ledger_url) as store:
            recorded = store.turn_events(THREAD, TURN)
            assert {(str(e.kind), e.tenant_id, e.correlation_id) for e in recorded} == {
                (kind, winner, f"c-{winner}") for kind in ("INTENT", "DECISION", "EXECUTION")
            }
            assert store.by_correlation(f"c-{loser}") == []


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of each SSE message."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines.get("data") or "{}")))
    return found


def _body(tenant: str) -> dict[str, Any]:
    return envelope(MESSAGES[tenant], correlation_id=f"c-{tenant}", thread_id=THREAD, turn_id=TURN)


def _refused_without_a_trace(answer: str, winner: str) -> None:
    lost = json.loads(answer)
    assert (lost["reason_code"], lost["field"]) == ("admission.correlation_conflict", "payload.thread_id")
    assert MESSAGES[winner] not in answer and f"c-{winner}" not in answer


@pytest.mark.parametrize("first", TENANTS)
async def test_two_tenants_on_the_same_turn_ids_never_share_the_turn(
    tmp_path, temporal_server, first
) -> None:
    async with paused_worker_stack(tmp_path, temporal_server) as race:

        async def send(tenant: str) -> tuple[int, str]:
            answer = await race.http.post(
                "/ingress/intent",
                params={"wait": "execution"},
                json=_body(tenant),
                headers=bearer(race.keys[tenant]),
            )
            return answer.status_code, answer.text

        answers = await race.run(first, send)
        statuses = sorted(status for status, _ in answers.values())
        assert statuses == [202, 409], answers
        winner = next(t for t, (status, _) in answers.items() if status == 202)
        loser = next(t for t in answers if t != winner)
        won = json.loads(answers[winner][1])
        # The winner's own turn, whole: its message decided, its answer recorded.
        assert won["deduplicated"] is False and won["correlation_id"] == f"c-{winner}"
        assert won["execution"]["payload"]["output_text"] == f"echo: {MESSAGES[winner]}"
        assert won["execution"]["tenant_id"] == winner
        # The loser: a clear refusal that names nothing of the winner's turn.
        _refused_without_a_trace(answers[loser][1], winner)
        race.check_ledger(winner, loser)

        # The loser's own view of the ledger holds nothing of it; its next turn elsewhere runs.
        seen = await race.http.get("/snapshot", params={"limit": 100}, headers=bearer(race.keys[loser]))
        assert seen.json()["events"] == []
        again = await race.http.post(
            "/ingress/intent",
            params={"wait": "execution"},
            json=envelope("my own thread", correlation_id=f"c-{loser}-2", thread_id=f"{loser}-own"),
            headers=bearer(race.keys[loser]),
        )
        assert again.status_code == 202, again.text
        assert again.json()["execution"]["payload"]["output_text"] == "echo: my own thread"


async def test_two_streamed_turns_on_the_same_ids_one_streams_its_own_the_other_is_refused(
    tmp_path, temporal_server
) -> None:
    async with paused_worker_stack(tmp_path, temporal_server) as race:

        async def send(tenant: str) -> tuple[int, str]:
            async with race.http.stream(
                "POST",
                "/ingress/intent",
                params={"stream": "true"},
                json=_body(tenant),
                headers=bearer(race.keys[tenant]),
            ) as answer:
                return answer.status_code, (await answer.aread()).decode()

        answers = await race.run("alice", send)
        assert sorted(status for status, _ in answers.values()) == [200, 409], answers
        winner = next(t for t, (status, _) in answers.items() if status == 200)
        loser = next(t for t in answers if t != winner)
        streamed = answers[winner][1]
        events = _sse(streamed)
        assert events[-1][0] == "done" and events[-1][1]["correlation_id"] == f"c-{winner}"
        text = "".join(data["text"] for kind, data in events if kind == "token")
        assert text == f"echo: {MESSAGES[winner]}"
        assert MESSAGES[loser] not in streamed
        _refused_without_a_trace(answers[loser][1], winner)
        race.check_ledger(winner, loser)


async def test_an_unscoped_caller_cannot_join_a_tenants_turn(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    tenant = await asyncio.to_thread(make_key, settings, "acme", ROLES)
    operator = await asyncio.to_thread(make_key, settings, "*", "admin")
    async with running_stack(settings) as stack:
        mine = envelope("acme's question", correlation_id="c-acme", thread_id="t-acme", turn_id="u-1")
        first = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=mine, headers=bearer(tenant)
        )
        assert first.status_code == 202
        same_ids = envelope("operator", correlation_id="c-op", thread_id="t-acme", turn_id="u-1")
        refused = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=same_ids, headers=bearer(operator)
        )
        assert refused.status_code == 409
        assert (refused.json()["reason_code"], refused.json()["field"]) == (
            "admission.correlation_conflict",
            "payload.turn_id",
        )
        # its correlation id too
        again = envelope("operator", correlation_id="c-acme", thread_id="t-op", turn_id="u-1")
        refused = await stack.http.post("/ingress/intent", json=again, headers=bearer(operator))
        assert refused.status_code == 409 and refused.json()["field"] == "correlation_id"
        # a turn of its own in that thread is still an operator's to record
        own = envelope("operator note", correlation_id="c-op2", thread_id="t-acme", turn_id="u-op")
        done = await stack.http.post("/ingress/intent", json=own, headers=bearer(operator))
        assert done.status_code == 202, done.text
