"""Worker processes against a real Temporal dev server: `turngate worker --processes 2` with
every child SIGKILLed mid-call (restarted, the turn ends exactly once; SIGTERM stops every
child), and `turngate dev --worker-processes 2` as one command."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.processes import LONG_MESSAGE, spawn, turn_inside_provider_call, until, wait_http
from tests.stack import make_settings, running_stack
from turngate.devserver import free_port
from turngate.ledger import LedgerStore, verify_ledger
from turngate.temporal_client import connect
from turngate.worker.pollers import polling_pids


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(e.kind) for e in store.by_correlation(correlation_id)]


async def test_worker_processes_killed_mid_call_are_restarted_and_the_turn_ends_once(
    tmp_path, temporal_server
) -> None:
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=250)
    store = LedgerStore(settings.effective_ledger_url)
    supervisor = spawn(["worker", "--processes", "2"], settings, tmp_path / "worker.log")
    client = await connect(settings)
    try:
        await until(lambda: len(_children(supervisor.pid)) == 2, 60, "two worker processes")
        first = set(_children(supervisor.pid))
        for _ in range(600):  # both poll the turn queue
            if first <= await polling_pids(client, settings.turns_task_queue):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the worker processes never polled")
        async with running_stack(settings, worker=False) as stack:
            await turn_inside_provider_call(stack, store, "c-kill")
            for pid in first:
                os.kill(pid, signal.SIGKILL)
            await until(
                lambda: len(set(_children(supervisor.pid)) - first) == 2,
                60,
                "both worker processes restarted",
            )
            await until(lambda: "EXECUTION" in _kinds(store, "c-kill"), 90, "the EXECUTION")
            # More turns after the restart run, each exactly once.
            for i in range(4):
                done = await stack.chat(f"after {i}", correlation_id=f"c-after-{i}")
                assert done.status_code == 202 and "execution" in done.json()
        assert _kinds(store, "c-kill") == ["INTENT", "DECISION", "EXECUTION"]
        assert store.by_correlation("c-kill")[-1].payload["output_text"] == f"echo: {LONG_MESSAGE}"
        assert verify_ledger(store).ok
        assert supervisor.poll() is None  # two exits are under the restart limit
        children = _children(supervisor.pid)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(60) == 0
        assert all(not Path(f"/proc/{c}").exists() or _zombie(c) for c in children)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(15)
        store.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _is_worker(pid: int) -> bool:
    try:
        return b"worker" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


async def test_dev_with_worker_processes_runs_turns_restarts_a_killed_one_and_stops_them_all(
    tmp_path: Path,
) -> None:
    """`turngate dev --worker-processes 2 --encrypt`: the workers get what the dev process set up
    (its Temporal server, data dir, policy, encryption key file), a SIGKILLed one comes back, and
    Ctrl-C stops them all."""
    data, api, temporal, ui = tmp_path / "data", free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNGATE_", "TEMPORAL_"))}
    command = [sys.executable, "-m", "turngate", "dev", "--worker-processes", "2", "--encrypt"]
    command += ["--data-dir", str(data), "--port", str(api), "--temporal-port", str(temporal)]
    command += ["--ui-port", str(ui)]
    log = open(tmp_path / "dev.log", "wb")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    async def turn(http: httpx.AsyncClient) -> None:
        body = {
            "interface_version": 3,
            "correlation_id": f"c-{uuid.uuid4().hex}",
            "payload": {"intent_type": "chat.message", "payload": {"message": "hello workers"}},
        }
        resp = await http.post("/ingress/intent", params={"wait": "execution"}, json=body)
        assert resp.status_code == 202 and "execution" in resp.json(), resp.text

    workers: list[int] = []
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{api}/healthz", 180)
        workers = [c for c in _children(proc.pid) if _is_worker(c)]
        assert len(workers) == 2
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api}", timeout=60) as http:
            await turn(http)
            os.kill(workers[0], signal.SIGKILL)
            await until(
                lambda: (
                    len([c for c in _children(proc.pid) if _is_worker(c)]) == 2
                    and workers[0] not in _children(proc.pid)
                ),
                60,
                "the killed worker process restarted",
            )
            for _ in range(3):
                await turn(http)
        workers = [c for c in _children(proc.pid) if _is_worker(c)]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(10)
        log.close()
    output = (tmp_path / "dev.log").read_text()
    assert code == 0, output[-3000:]
    assert "workers        2 processes" in output
    assert "exited with -9; restarting it" in output
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in workers)
