"""The secrets scan: after a full run with an API key and a provider key set (good turns, a
provider that refuses the key and echoes it back, a fault snapshot, refused requests), neither
secret appears in any ledger row, artifact, log record, error body, workflow history,
/capabilities, /status or the printed configuration."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.fakes import fake_openai
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.temporal_client import connect

# made up per run: no key-shaped secret is committed to the repository
PROVIDER_KEY = f"sk-test-provider-SECRET-{secrets.token_hex(12)}"


def _needles(api_key: str) -> list[str]:
    # the whole secrets and their distinctive tails (a partial echo is a leak too)
    return [api_key, api_key[-24:], PROVIDER_KEY, PROVIDER_KEY[-16:]]


async def test_no_secret_anywhere_after_a_full_run(
    tmp_path: Path, temporal_server: DevServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    with fake_openai("a fine answer") as server:
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            auth_mode="keys",
            openai_api_key=PROVIDER_KEY,
            openai_base_url=server.base_url,
            default_provider="openai",
            wait_timeout_s=15.0,
        )
        api_key = make_key(settings, "acme", "admin")
        async with running_stack(settings) as stack:
            http, auth = stack.http, bearer(api_key)
            ok = await http.post(
                "/ingress/intent",
                params={"wait": "execution"},
                json=envelope("hi", correlation_id="c-ok"),
                headers=auth,
            )
            assert ok.json()["execution"]["payload"]["output_text"] == "a fine answer"
            server.fail_next(status=401)  # the vendor echoes the key back in its error message
            refused = await http.post(
                "/ingress/intent",
                params={"wait": "execution"},
                json=envelope("again", correlation_id="c-401", inputs={"debug_snapshot": True}),
                headers=auth,
            )
            error = refused.json()["execution"]["payload"]["error"]
            assert error["code"] == "provider.auth"
            seen += [ok.text, refused.text]
            for path in ("/capabilities", "/status", "/snapshot", "/verify?thread_id=c-401", "/healthz"):
                response = await http.get(path, headers=auth)
                assert response.status_code == 200, (path, response.text)
                seen.append(response.text + str(response.headers))
            for headers in (
                bearer(PROVIDER_KEY),
                bearer(api_key + "x"),
                bearer(api_key[:-1]),
                {"Authorization": api_key},
                {},
            ):
                response = await http.get("/snapshot", headers=headers)
                assert response.status_code == 401
                seen.append(response.text + str(response.headers))
            seen.append((await http.get("/metrics", headers=auth)).text)

        client = await connect(settings)
        async for workflow in client.list_workflows(f"TaskQueue = '{settings.turns_task_queue}'"):
            history = await client.get_workflow_handle(workflow.id).fetch_history()
            seen.append(history.to_json())

    with LedgerStore(settings.effective_ledger_url) as ledger, ledger.engine.connect() as conn:
        for table in ("events", "api_keys"):
            seen += [str(tuple(row)) for row in conn.execute(text(f"SELECT * FROM {table}"))]
    artifacts = [p for p in Path(settings.effective_artifacts).rglob("*") if p.is_file()]
    assert any("snapshot" in str(p) or p.stat().st_size for p in artifacts)
    seen += [p.read_bytes().decode("utf-8", "replace") for p in artifacts]
    seen.append(caplog.text)
    seen.append(str(settings.public_view()))
    assert len(seen) > 20

    everything = "\n".join(seen)
    for needle in _needles(api_key):
        assert needle not in everything, f"a secret leaked: ...{needle[-6:]}"
