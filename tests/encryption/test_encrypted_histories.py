"""With encryption keys set, Temporal holds ciphertext: a turn's raw history (fetched without the
codec) contains neither the message nor the answer; the history replays through the codec; the
codec endpoint decodes for an admin key (also for the `temporal` CLI) and refuses everyone else."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory

from tests.security.conftest import bearer, make_key
from tests.stack import make_settings, running_stack
from turngate.audit.replay import replay_histories
from turngate.devserver import DevServer, find_temporal_cli
from turngate.settings import Settings
from turngate.temporal_client import data_converter

UI_ORIGIN = "http://127.0.0.1:8233"


def _key() -> str:
    return f"k1={base64.b64encode(os.urandom(32)).decode()}"


def _settings(tmp_path: Path, temporal_server: DevServer, **overrides: object) -> Settings:
    return make_settings(
        tmp_path,
        temporal_server.address,
        auth_mode="keys",
        temporal_ui_url=f"{UI_ORIGIN}/namespaces",
        **overrides,
    )


async def _one_turn(settings: Settings, message: str) -> tuple[str, str]:
    """Runs a turn; returns (workflow id, answer)."""
    writer = make_key(settings, "acme", "intent.write,snapshot.read")
    async with running_stack(settings) as stack:
        body = {
            "interface_version": 3,
            "correlation_id": f"c-{uuid.uuid4().hex}",
            "payload": {"intent_type": "chat.message", "payload": {"message": message}},
        }
        response = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=body, headers=bearer(writer)
        )
        assert response.status_code == 202, response.text
        return response.json()["workflow_id"], response.json()["execution"]["payload"]["output_text"]


async def _raw_history(address: str, workflow_id: str) -> WorkflowHistory:
    plain = await Client.connect(address)  # no codec: what the Temporal server stores
    return await plain.get_workflow_handle(workflow_id).fetch_history()


def _bytes(history: WorkflowHistory) -> bytes:
    return History(events=history.events).SerializeToString()


def _payload_texts(node: object) -> str:
    """Every payload's data in a history as `temporal workflow show --output json` prints it."""
    if isinstance(node, dict):
        own = node.get("data") if isinstance(node.get("data"), str) and "metadata" in node else None
        texts = [base64.b64decode(own).decode("utf-8", "replace")] if own else []
        return "\n".join(texts + [_payload_texts(v) for v in node.values()])
    if isinstance(node, list):
        return "\n".join(_payload_texts(v) for v in node)
    return ""


async def _single(history: WorkflowHistory) -> AsyncIterator[WorkflowHistory]:
    yield history


async def test_raw_history_holds_neither_message_nor_answer(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    message = f"merger plans {uuid.uuid4().hex}"
    # Control: without keys the same check finds the plaintext, so it can see it.
    plain_settings = make_settings(tmp_path / "plain", temporal_server.address, auth_mode="keys")
    plain_id, _ = await _one_turn(plain_settings, message)
    assert message.encode() in _bytes(await _raw_history(temporal_server.address, plain_id))

    settings = _settings(tmp_path / "enc", temporal_server, encryption_keys=_key())
    workflow_id, answer = await _one_turn(settings, message)
    assert message in answer  # the echo provider answered it
    raw = await _raw_history(temporal_server.address, workflow_id)
    raw_bytes = _bytes(raw)
    assert message.encode() not in raw_bytes
    assert answer.encode() not in raw_bytes
    assert b"binary/encrypted" in raw_bytes

    # Replay passes through the codec; without it the history cannot be read.
    replayed = await replay_histories(_single(raw), data_converter=data_converter(settings))
    assert replayed.ok, replayed.results
    unreadable = await replay_histories(_single(raw))
    assert not unreadable.ok


@pytest.fixture
async def encrypted(tmp_path: Path, temporal_server: DevServer) -> AsyncIterator[tuple[Settings, str, str]]:
    settings = _settings(tmp_path, temporal_server, encryption_keys=_key())
    message = f"codec {uuid.uuid4().hex}"
    workflow_id, _ = await _one_turn(settings, message)
    yield settings, workflow_id, message


async def test_codec_endpoint_decodes_for_admin_only(
    encrypted: tuple[Settings, str, str], temporal_server: DevServer
) -> None:
    settings, workflow_id, message = encrypted
    raw = await _raw_history(temporal_server.address, workflow_id)
    started = raw.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    body = {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in started.metadata.items()},
                "data": base64.b64encode(started.data).decode(),
            }
        ]
    }
    admin = make_key(settings, "*", "admin")
    reader = make_key(settings, "acme", "snapshot.read,intent.write")
    async with running_stack(settings, worker=False) as stack:
        decoded = await stack.http.post("/codec/decode", json=body, headers=bearer(admin))
        assert decoded.status_code == 200, decoded.text
        [payload] = decoded.json()["payloads"]
        assert message in base64.b64decode(payload["data"]).decode()
        assert base64.b64decode(payload["metadata"]["encoding"]) == b"json/plain"

        # encode then decode is the identity (the UI encodes signal/query inputs it sends)
        encoded = await stack.http.post("/codec/encode", json=decoded.json(), headers=bearer(admin))
        assert encoded.status_code == 200
        assert base64.b64decode(encoded.json()["payloads"][0]["metadata"]["encoding"]) == b"binary/encrypted"
        again = await stack.http.post("/codec/decode", json=encoded.json(), headers=bearer(admin))
        assert again.json() == decoded.json()

        assert (await stack.http.post("/codec/decode", json=body)).status_code == 401
        refused = await stack.http.post("/codec/decode", json=body, headers=bearer(reader))
        assert refused.status_code == 403
        assert message not in refused.text
        bad = await stack.http.post("/codec/decode", content=b"not json", headers=bearer(admin))
        assert (bad.status_code, bad.json()["reason_code"]) == (400, "codec.bad_request")

        # The Temporal UI's origin may call it from a browser (preflight without credentials).
        preflight = await stack.http.options(
            "/codec/decode",
            headers={
                "Origin": UI_ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == UI_ORIGIN
        foreign = await stack.http.options(
            "/codec/decode",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in foreign.headers
        # Other routes stay same-origin.
        other = await stack.http.get("/healthz", headers={"Origin": UI_ORIGIN})
        assert "access-control-allow-origin" not in other.headers


async def test_the_temporal_cli_shows_the_history_through_the_codec(
    encrypted: tuple[Settings, str, str], temporal_server: DevServer
) -> None:
    settings, workflow_id, message = encrypted
    admin = make_key(settings, "*", "admin")
    async with running_stack(settings, worker=False):
        base = [str(find_temporal_cli()), "workflow", "show", "-w", workflow_id, "--output", "json"]
        base += ["--address", temporal_server.address]
        codec = ["--codec-endpoint", f"http://{settings.host}:{settings.port}/codec"]

        def show(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60)

        decoded = await asyncio.to_thread(show, *codec, "--codec-auth", f"Bearer {admin}")
        assert decoded.returncode == 0, decoded.stderr
        assert message in _payload_texts(json.loads(decoded.stdout))
        without = await asyncio.to_thread(show)
        assert without.returncode == 0
        assert message not in _payload_texts(json.loads(without.stdout))


async def test_codec_endpoint_without_keys_says_disabled(tmp_path: Path, temporal_server: DevServer) -> None:
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    admin = make_key(settings, "*", "admin")
    async with running_stack(settings, worker=False) as stack:
        response = await stack.http.post("/codec/decode", json={"payloads": []}, headers=bearer(admin))
        assert (response.status_code, response.json()["reason_code"]) == (404, "codec.disabled")
