"""A turn's DECISION decided again: its workflow task ran again after the worker that held it
stalled past the workflow task timeout (SIGSTOP) or died (SIGKILL) with the DECISION already in
the ledger, or after a restart on another policy. Real worker processes on one task queue and
one ledger, each with its own artifact directory; the provider call is a local activity, so the
DECISION and the call share the first workflow task. Every turn ends with exactly one INTENT,
DECISION and EXECUTION, and `turngate verify` passes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.faults.processes import kinds, until
from tests.processes import process_env, spawn
from tests.stack import make_settings, running_stack
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore
from turngate.settings import Settings
from turngate.temporal_client import connect
from turngate.worker.pollers import polling_pids
from turngate.workflows.shared import TurnResult
from turngate.workflows.turn import TurnWorkflow

#: The provider call (a local activity, after the DECISION, in the same workflow task) lasts this
#: long: under the SDK's workflow task heartbeat (80% of the 10 s task timeout), so the DECISION's
#: marker is not in the history when the worker stops.
CALL_MS = 4000
MESSAGE = "decide me once"


def _worker(settings: Settings, tmp_path: Path, name: str, **env: str) -> subprocess.Popen[bytes]:
    return spawn(
        ["worker"],
        settings,
        tmp_path / f"worker-{name}.log",
        TURNGATE_PROVIDER_ACTIVITY="local",
        TURNGATE_ECHO_LATENCY_MS=str(CALL_MS),
        TURNGATE_ARTIFACTS=str(_artifacts(tmp_path, name)),
        **env,
    )


def _artifacts(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"artifacts-{name}"


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def _polling(settings: Settings, procs: list[subprocess.Popen[bytes]]) -> None:
    client = await connect(settings)
    for _ in range(600):
        if {p.pid for p in procs} <= await polling_pids(client, settings.turns_task_queue):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the workers never polled the turn queue")


def _holder(tmp_path: Path, workers: dict[str, subprocess.Popen[bytes]]) -> str:
    """The worker that recorded the DECISION: the one whose artifact directory has its manifest."""
    found = [
        name for name in workers if any((_artifacts(tmp_path, name) / "standard" / "manifest").rglob("*"))
    ]
    assert len(found) == 1, found
    return found[0]


async def _decided(stack: Any, store: LedgerStore, correlation_id: str) -> str:
    """Start a turn; return its workflow id once its DECISION is recorded (the call then runs)."""
    resp = await stack.chat(MESSAGE, correlation_id=correlation_id, wait=None)
    assert resp.status_code == 202, resp.text
    await until(lambda: "DECISION" in kinds(store, correlation_id), 60, "the DECISION")
    return str(resp.json()["workflow_id"])


async def _outcome(settings: Settings, workflow_id: str) -> TurnResult:
    """The turn workflow's result: it must complete (a FAILED turn raises here), and its history
    (a task that ran again, an adopted DECISION) must replay on the current code."""
    client = await connect(settings)
    handle = client.get_workflow_handle(workflow_id, result_type=TurnResult)
    result = await asyncio.wait_for(handle.result(), 90)
    replayer = Replayer(workflows=[TurnWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(await handle.fetch_history(), raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    return result


def _verify(settings: Settings, artifacts: Path, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "turngate", "verify", "--json"],
        env=process_env(settings, TURNGATE_ARTIFACTS=str(artifacts), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _one_turn(store: LedgerStore, correlation_id: str) -> dict[str, Any]:
    events = store.by_correlation(correlation_id)
    assert [str(e.kind) for e in events] == ["INTENT", "DECISION", "EXECUTION"]
    assert store.head()[0] == 3  # nothing else was appended
    return {str(e.kind): e.payload for e in events}


@pytest.mark.parametrize("how", ["stall", "crash"])
async def test_a_worker_stopped_after_the_decision_leaves_one_turn(
    tmp_path: Path, temporal_server, how: str
) -> None:
    """SIGSTOP (past the workflow task timeout, then SIGCONT) or SIGKILL of the worker holding
    the turn after it recorded the DECISION: the other worker decides again in its own artifact
    directory, records nothing new, executes, and the turn completes."""
    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    workers = {name: _worker(settings, tmp_path, name) for name in ("a", "b")}
    try:
        await _polling(settings, list(workers.values()))
        async with running_stack(settings, worker=False) as stack:
            workflow_id = await _decided(stack, store, "c-rerun")
            held = _holder(tmp_path, workers)
            other = next(name for name in workers if name != held)
            recorded = store.by_correlation("c-rerun")[1]
            workers[held].send_signal(signal.SIGSTOP if how == "stall" else signal.SIGKILL)
            result = await _outcome(settings, workflow_id)
            if how == "stall":
                workers[held].send_signal(signal.SIGCONT)
                # The stalled worker's call goes on where it stopped: let it end before counting.
                await asyncio.sleep(CALL_MS / 1000 + 2)
        assert result.decision == "ALLOW" and result.error_code is None
        turn = _one_turn(store, "c-rerun")
        assert store.by_correlation("c-rerun")[1] == recorded
        assert turn["EXECUTION"]["output_text"] == f"echo: {MESSAGE}"
        assert "error" not in turn["EXECUTION"]
        # The survivor wrote every artifact the turn points at (the DECISION's again, byte for byte).
        report = _verify(settings, _artifacts(tmp_path, other))
        assert report["checked_artifacts"] >= 2 and not report["failures"]
    finally:
        _stop(list(workers.values()))
        store.close()


@pytest.mark.parametrize(
    ("policy", "error_code"),
    [("turngate.policies.max_user_messages", None), ("turngate.policies.deny_all", "turn.redecided")],
)
async def test_a_turn_decided_again_on_another_policy_keeps_its_recorded_decision(
    tmp_path: Path, temporal_server, policy: str, error_code: str | None
) -> None:
    """The only worker dies after the DECISION; the turn is retried on a worker restarted on
    another policy. The recorded ALLOW stands: executed when the new run would send the same
    request (another allowing policy), else ended by an EXECUTION that says why (a denying one);
    the provider is never called for a request the recorded DECISION did not allow."""
    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    first = _worker(settings, tmp_path, "a")
    workers = [first]
    try:
        await _polling(settings, [first])
        async with running_stack(settings, worker=False) as stack:
            workflow_id = await _decided(stack, store, "c-retry")
            recorded = store.by_correlation("c-retry")[1]
            first.send_signal(signal.SIGKILL)
            first.wait(15)
            workers.append(_worker(settings, tmp_path, "a", TURNGATE_POLICY_MODULE=policy))
            load_policy(policy)  # as a worker does at start, outside the sandbox the replay runs in
            result = await _outcome(settings, workflow_id)
        assert result.decision == "ALLOW" and result.error_code == error_code
        turn = _one_turn(store, "c-retry")
        assert store.by_correlation("c-retry")[1] == recorded
        assert turn["DECISION"]["policy_id"] == "turngate.allow_all"
        execution = turn["EXECUTION"]
        assert execution["context_digest"] == recorded.payload["context_digest"]
        if error_code is None:
            assert execution["output_text"] == f"echo: {MESSAGE}"
        else:
            assert execution["output_text"] == "" and execution["error"]["code"] == error_code
            assert "usage" not in execution
        _verify(settings, _artifacts(tmp_path, "a"))
    finally:
        _stop(workers)
        store.close()
