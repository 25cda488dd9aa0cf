"""A worker killed after the provider answered and the EXECUTION was recorded, before Temporal
heard of the result (the turn's shape 2: ``turngate.call_and_record``): the retry on another
worker finds the EXECUTION in the ledger and returns it. Exactly one provider call, one
EXECUTION, and the workflow ends with that EXECUTION.

The window is made, not raced: the fake provider pauses the Temporal server (SIGSTOP) as the
request arrives, so the activity's completion cannot reach it; the test waits for the EXECUTION
in the ledger, kills the worker, resumes the server and starts a second worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any

from tests.fakes.llm_servers import FakeOllamaServer
from tests.processes import spawn, until
from tests.stack import make_settings, running_stack
from turngate.devserver import DevServer, free_port
from turngate.ledger import LedgerStore, verify_ledger
from turngate.temporal_client import connect
from turngate.workflows.shared import TurnResult


class PausingOllama(FakeOllamaServer):
    """Pauses the Temporal server on the first request, then answers."""

    def __init__(self, temporal_pid: int) -> None:
        super().__init__("four")
        self._pid = temporal_pid
        self.paused = threading.Event()

    def _handle(self, handler: Any) -> None:
        if not self.paused.is_set():
            os.kill(self._pid, signal.SIGSTOP)
            self.paused.set()
        super()._handle(handler)


def _kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(e.kind) for e in store.by_correlation(correlation_id)]


async def test_worker_killed_after_the_answer_was_recorded(tmp_path) -> None:
    server = DevServer(
        db_file=tmp_path / "temporal.sqlite3",
        port=free_port(),
        ui_port=None,
        log_file=tmp_path / "temporal.log",
    )
    server.start()
    assert server.process is not None
    pid = server.process.pid
    provider = PausingOllama(pid).start()
    first = second = None
    store = None
    try:
        await server.wait_ready()
        settings = make_settings(tmp_path, server.address, ollama_host=provider.origin)
        store = LedgerStore(settings.effective_ledger_url)
        first = spawn(["worker"], settings, tmp_path / "worker-1.log", OLLAMA_HOST=provider.origin)
        async with running_stack(settings, worker=False) as stack:
            resp = await stack.chat("what is 2+2?", correlation_id="c-answered", wait=None)
            workflow_id = resp.json()["workflow_id"]
            await until(lambda: "EXECUTION" in _kinds(store, "c-answered"), 60, "the EXECUTION")
            assert provider.paused.is_set()  # Temporal has not heard of the answer
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            os.kill(pid, signal.SIGCONT)
            second = spawn(["worker"], settings, tmp_path / "worker-2.log", OLLAMA_HOST=provider.origin)
            client = await connect(settings)
            result: TurnResult = await client.get_workflow_handle(
                workflow_id, result_type=TurnResult
            ).result()
        assert len(provider.requests) == 1
        assert _kinds(store, "c-answered") == ["INTENT", "DECISION", "EXECUTION"]
        execution = store.by_correlation("c-answered")[-1]
        assert execution.payload["output_text"] == "four"
        assert result.execution is not None and result.execution.digest == execution.digest
        assert verify_ledger(store).ok
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.terminate()
                proc.wait(15)
        provider.stop()
        if store is not None:
            store.close()
        server.stop()
