"""`turngate worker --processes 2` against a real Temporal dev server: turns run on both
processes, every child SIGKILLed mid-call is restarted and the turn still ends exactly once,
and SIGTERM stops every child."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.processes import LONG_MESSAGE, spawn, turn_inside_provider_call, until
from tests.stack import make_settings, running_stack
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
