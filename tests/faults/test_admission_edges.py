"""Admission edges: /snapshot pages of up to 2000 events, and turn slots that come back on every
path of POST /ingress/intent (a ledger read failing mid-wait, a client that leaves mid-wait).
The API and the worker are real child processes; the failing ledger is PostgreSQL behind a proxy
that drops the connection carrying the turn read."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.faults.misbehaving_proxy import MisbehavingProxy
from tests.faults.processes import child_stack, kinds, until
from tests.ledger.helpers import draft
from tests.stack import api_server, envelope, make_settings
from turngate.api.observe import SNAPSHOT_MAX_LIMIT
from turngate.ledger import LedgerStore


def _a_turn_runs(base: str, correlation_id: str) -> None:
    """A turn is admitted and answered: no slot is left taken."""
    resp = httpx.post(
        f"{base}/ingress/intent",
        params={"wait": "execution"},
        json=envelope("hello", correlation_id=correlation_id),
        timeout=60,
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["execution"]["payload"]["output_text"] == "echo: hello"


def _in_flight(base: str) -> int:
    return int(httpx.get(f"{base}/status", timeout=10).json()["job_runtime"]["admission"]["in_flight"])


async def test_snapshot_pages_hold_up_to_2000_events_and_larger_limits_are_clamped(
    tmp_path: Path, temporal_server
) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    store.append_many([draft(f"c-{i}", thread_id=f"t-{i}") for i in range(SNAPSHOT_MAX_LIMIT + 1)])
    store.close()
    assert SNAPSHOT_MAX_LIMIT == 2000
    async with api_server(settings) as http:
        for asked, served in ((1999, 1999), (2000, 2000), (2001, 2000), (10**9, 2000)):
            resp = await http.get("/snapshot", params={"limit": asked})
            assert resp.status_code == 200, (asked, resp.text)
            body = resp.json()
            assert (body["limit"], len(body["events"]), body["length"]) == (served, served, 2001), asked
        last = await http.get("/snapshot", params={"limit": 2000, "offset": 2000})
        assert [e["correlation_id"] for e in last.json()["events"]] == ["c-2000"]
        refused = await http.get("/snapshot", params={"limit": 0})
        assert refused.status_code == 422
        assert refused.json()["reason_code"] == "request.invalid_parameter"


@pytest.fixture
def postgres_ledger(postgres_server):
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)


async def test_a_ledger_read_failing_mid_wait_gives_the_slot_back(
    tmp_path: Path, temporal_server, postgres_ledger: str
) -> None:
    from sqlalchemy.engine import make_url

    direct = make_url(postgres_ledger)
    proxy = MisbehavingProxy((direct.host or "127.0.0.1", direct.port or 5432))
    through_proxy = direct.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    settings = make_settings(tmp_path, temporal_server.address, ledger_url=postgres_ledger)
    store = LedgerStore(postgres_ledger)
    env = {"TURNGATE_TURN_QUEUE_MAX": "1", "TURNGATE_LEDGER_URL": postgres_ledger}
    try:
        with child_stack(settings, tmp_path, api_env={"TURNGATE_LEDGER_URL": through_proxy}, **env) as base:
            # The turn read of the wait (its WHERE names turn_id) loses its connection.
            proxy.cut_on = b"turn_id = "
            resp = httpx.post(
                f"{base}/ingress/intent",
                params={"wait": "execution"},
                json=envelope("hello", correlation_id="c-cut"),
                timeout=60,
            )
            assert resp.status_code == 503, resp.text
            assert resp.json()["reason_code"] == "ledger.unavailable"
            assert proxy.cuts >= 1
            proxy.cut_on = None
            # The only slot (TURNGATE_TURN_QUEUE_MAX=1) is back, and the turn ran on.
            await until(lambda: _in_flight(base) == 0, 60, "the slot to come back")
            await until(lambda: "EXECUTION" in kinds(store, "c-cut"), 60, "the first turn to finish")
            # After a failed read the API refuses intake at once until its ledger check passes
            # again (about a second, docs/RELIABILITY.md): wait for /healthz to say so.
            await until(
                lambda: httpx.get(f"{base}/healthz", timeout=10).status_code == 200,
                30,
                "the ledger to read as up",
            )
            _a_turn_runs(base, "c-after")
    finally:
        proxy.close()
        store.close()


async def test_a_client_leaving_mid_wait_gives_the_slot_back(tmp_path: Path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    env = {"TURNGATE_TURN_QUEUE_MAX": "1", "TURNGATE_ECHO_DELAY_MS": "300", "TURNGATE_WAIT_TIMEOUT_S": "120"}
    try:
        with child_stack(settings, tmp_path, **env) as base:
            words = " ".join(f"w{i}" for i in range(10))  # ~3 s of streaming
            with pytest.raises(httpx.ReadTimeout):  # the client gives up mid-wait and hangs up
                httpx.post(
                    f"{base}/ingress/intent",
                    params={"wait": "execution"},
                    json=envelope(words, correlation_id="c-leave"),
                    timeout=1.5,
                )
            assert _in_flight(base) == 1  # the turn still runs: its slot is still its own
            await until(lambda: "EXECUTION" in kinds(store, "c-leave"), 60, "the turn to finish")
            await until(lambda: _in_flight(base) == 0, 30, "the slot to come back")
            _a_turn_runs(base, "c-next")
    finally:
        store.close()
