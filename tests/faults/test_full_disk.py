"""Full disks under the SQLite ledger and under the local artifact store (a small tmpfs the test
fills; root only, skipped loudly otherwise): appends fail with a clear error and never corrupt
the database, the API refuses new intents before recording anything and says why, artifact
writes fail within the deadline and the turn records SYSTEM_ERROR, nothing partial is ever
referenced, and turns go on once space returns."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from tests.faults.full_disk import fill, small_tmpfs
from tests.faults.partitions import duplicates, ended_once, outcomes, until, verified
from tests.ledger.helpers import draft
from tests.processes import LONG_MESSAGE
from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore, LedgerUnavailableError

DISK_MIB = 8
MIN_FREE = 1 << 20
ARTIFACT_DEADLINE_S = 2.0
#: On top of the deadline: the turn's other steps, on a loaded machine.
MARGIN_S = 6.0


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_an_append_on_a_full_disk_fails_clearly_and_corrupts_nothing(tmp_path: Path) -> None:
    with (
        small_tmpfs(tmp_path / "disk", DISK_MIB) as disk,
        LedgerStore(f"sqlite:///{disk}/ledger.sqlite3") as store,
    ):
        for i in range(5):
            store.append(draft(f"c-{i}"))
        filler = fill(disk)
        with pytest.raises(LedgerUnavailableError, match="disk is full"):
            for i in range(5, 500):  # the WAL's free frames may take a few before it must grow
                store.append(draft(f"c-{i}", payload={"message": "x" * 8000}))
        recorded = store.head()[0]
        filler.unlink()
        assert _integrity(disk / "ledger.sqlite3") == "ok"
        store.append(draft("c-after"))
        assert store.head()[0] == recorded + 1
        assert duplicates(store) == []
        assert verified(store)


async def test_a_full_ledger_disk_under_turns_refuses_new_ones_and_ends_the_running_ones(
    tmp_path: Path, temporal_server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turngate")
    with small_tmpfs(tmp_path / "disk", DISK_MIB) as disk:
        ledger = disk / "ledger.sqlite3"
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            ledger_url=f"sqlite:///{ledger}",
            ledger_min_free_bytes=MIN_FREE,
            echo_delay_ms=150,
        )
        ids = [f"c-disk-{i}" for i in range(3)]
        async with running_stack(settings) as stack:
            with LedgerStore(settings.effective_ledger_url) as store:
                for correlation_id in ids:
                    resp = await stack.chat(LONG_MESSAGE, correlation_id=correlation_id, wait="decision")
                    assert resp.status_code == 202, resp.text
                filler = fill(disk)  # the turns are inside their provider calls
                assert all(len(store.by_correlation(c)) == 2 for c in ids)
                refused = await stack.chat("no room", correlation_id="c-disk-refused")
                assert refused.status_code == 503 and refused.json()["reason_code"] == "ledger.disk_full"
                assert int(refused.headers["retry-after"]) >= 1
                for _ in range(3):  # asked again and again: one log line per outage
                    health = await stack.http.get("/healthz")
                    assert health.status_code == 503, health.text
                    assert health.json()["reason_code"] == "ledger.disk_full"
                    assert health.json()["ledger"] == "disk_full"
                await asyncio.sleep(2.5)  # the provider calls end; their appends meet the full disk
                assert store.by_correlation("c-disk-refused") == []
                filler.unlink()
                await until(lambda: ended_once(store, ids), 60, "every running turn to end")
                assert outcomes(store, ids) == {"EXECUTION": len(ids)}
                assert (await stack.http.get("/healthz")).status_code == 200
                retried = await stack.chat("no room", correlation_id="c-disk-refused")
                assert retried.json()["execution"]["payload"]["output_text"] == "echo: no room"
                assert _integrity(ledger) == "ok"
                assert duplicates(store) == []
                assert verified(store)
    messages = [r.getMessage() for r in caplog.records if r.name == "turngate.api.disk_guard"]
    assert [m.split(":")[0] for m in messages] == ["ledger disk full", "ledger disk has room again"], messages
    full_errors = [
        r for r in caplog.records if "disk is full" in r.getMessage() or "disk is full" in str(r.exc_info)
    ]
    assert full_errors, "the worker's failed appends name the full disk"


async def test_a_full_artifact_disk_ends_turns_with_system_error_and_references_nothing_partial(
    tmp_path: Path, temporal_server
) -> None:
    with small_tmpfs(tmp_path / "artifacts", DISK_MIB) as disk:
        settings = make_settings(
            tmp_path, temporal_server.address, artifacts=str(disk), artifact_deadline_s=ARTIFACT_DEADLINE_S
        )
        async with running_stack(settings) as stack:
            with LedgerStore(settings.effective_ledger_url) as store:
                # A large message first: offloaded while there is room (and the API's CPU pool,
                # which parses large bodies, started before the clock below runs).
                before = await stack.http.post(
                    "/ingress/intent",
                    params={"wait": "execution"},
                    json=envelope("y" * (70 * 1024), correlation_id="c-art-before"),
                )
                assert before.status_code == 202 and "execution" in before.json(), before.text
                filler = fill(disk)

                started = time.monotonic()
                resp = await stack.chat("full", correlation_id="c-art-full")
                elapsed = time.monotonic() - started
                assert resp.status_code == 202, resp.text
                decision = resp.json()["decision"]["payload"]
                assert decision["reason_codes"] == ["SYSTEM_ERROR"], decision
                assert "manifest" in decision["error"]["missing_pointers"]
                assert "manifest" not in decision  # nothing partial is referenced
                assert elapsed < ARTIFACT_DEADLINE_S + MARGIN_S, elapsed

                # The 64 KiB offload at ingress: 503 within the deadline, nothing recorded.
                started = time.monotonic()
                big = await stack.http.post(
                    "/ingress/intent", json=envelope("x" * (70 * 1024), correlation_id="c-art-big")
                )
                assert big.status_code == 503 and big.json()["reason_code"] == "artifact.unavailable", (
                    big.text
                )
                assert time.monotonic() - started < ARTIFACT_DEADLINE_S + MARGIN_S
                assert store.by_correlation("c-art-big") == []

                filler.unlink()
                after = await stack.chat("room again", correlation_id="c-art-after")
                assert after.json()["execution"]["payload"]["output_text"] == "echo: room again"
                big = await stack.http.post(
                    "/ingress/intent",
                    params={"wait": "execution"},
                    json=envelope("x" * (70 * 1024), correlation_id="c-art-big"),
                )
                assert big.status_code == 202 and "execution" in big.json(), big.text
                assert not list(disk.rglob("*.tmp")), "a failed write left a temp file behind"
                ids = ["c-art-before", "c-art-full", "c-art-after", "c-art-big"]
                assert ended_once(store, ids)
                assert outcomes(store, ids) == {"EXECUTION": 3, "SYSTEM_ERROR": 1}
                assert duplicates(store) == []
                assert verified(store)
