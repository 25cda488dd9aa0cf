"""bench/cli_start.py must not rot: one run of each command against a fake API (speed is not
checked here: bench/cli_start.py is where it is measured)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.cli.fake_api import API_KEY, FakeJobsApi
from turngate.cli import _uvicorn_server
from turngate.devserver import free_port

ROOT = Path(__file__).resolve().parents[2]


async def test_one_run_of_each_command() -> None:
    fake = FakeJobsApi()
    port = free_port()
    server = _uvicorn_server(fake.app, "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the fake API did not start"
            await asyncio.sleep(0.01)
        bench = await asyncio.create_subprocess_exec(
            sys.executable,
            "bench/cli_start.py",
            "--runs",
            "1",
            "--json",
            "--url",
            f"http://127.0.0.1:{port}",
            "--api-key",
            API_KEY,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(bench.communicate(), 300)  # bounds a hang only
    finally:
        server.should_exit = True
        await task
    results = json.loads(out)
    assert set(results) == {"help", "chat"}, err.decode()[-2000:]
    assert results["chat"]["command"].startswith("turngate chat ")
    for figures in results.values():
        assert figures["runs"] == 1 and figures["cpu_s"]["median"] > 0
        assert figures["status"] in ("PASS", "FAIL")
    assert sum(1 for request in fake.requests if request[1] == "/ingress/intent") == 2  # warm-up + 1
