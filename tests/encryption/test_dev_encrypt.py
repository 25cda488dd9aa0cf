"""`turngate dev --encrypt`, as a real process: a key file in the data dir (owner-only, kept
across restarts), histories encrypted on its Temporal server, and the dev Temporal UI pointed at
the API's codec endpoint."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests.processes import wait_http
from turngate.devserver import free_port


async def test_dev_encrypt(tmp_path: Path) -> None:
    data, api, temporal, ui = tmp_path / "data", free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNGATE_", "TEMPORAL_"))}
    command = [sys.executable, "-m", "turngate", "dev", "--encrypt", "--data-dir", str(data)]
    command += ["--port", str(api), "--temporal-port", str(temporal), "--ui-port", str(ui)]
    log = open(tmp_path / "dev.log", "wb")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    message = f"dev secret {uuid.uuid4().hex[:8]}"
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{api}/healthz", 120, proc)
        keys = data / "encryption-keys"
        assert stat.S_IMODE(keys.stat().st_mode) == 0o600
        body = {
            "interface_version": 3,
            "correlation_id": f"c-{uuid.uuid4().hex}",
            "payload": {"intent_type": "chat.message", "payload": {"message": message}},
        }
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api}", timeout=60) as http:
            turn = await http.post("/ingress/intent", params={"wait": "execution"}, json=body)
            assert turn.status_code == 202, turn.text
            # dev auth: the loopback caller is an admin, so the UI (same machine) can decode
            assert (await http.post("/codec/decode", json={"payloads": []})).status_code == 200
        client = await Client.connect(f"127.0.0.1:{temporal}")
        history = await client.get_workflow_handle(turn.json()["workflow_id"]).fetch_history()
        raw = History(events=history.events).SerializeToString()
        assert message.encode() not in raw and b"binary/encrypted" in raw
        async with httpx.AsyncClient(timeout=30) as http:
            ui_settings = (await http.get(f"http://127.0.0.1:{ui}/api/v1/settings")).json()
        assert ui_settings["Codec"]["Endpoint"] == f"http://127.0.0.1:{api}/codec"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    output = (tmp_path / "dev.log").read_text()
    assert f"encryption     on, keys in {data / 'encryption-keys'}" in output
