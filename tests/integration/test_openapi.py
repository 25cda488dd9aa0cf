"""The OpenAPI document tells the truth: a client generated from it by an ecosystem generator
(openapi-python-client) makes a turn against a real stack; every route documents its 2xx body
and the error body it really answers; SSE routes are ``text/event-stream``; unknown routes and
methods answer that error body; ``/docs`` loads nothing from a CDN."""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.security.conftest import make_key
from tests.stack import running_stack

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "turngate_generated_client"
SSE_ROUTES = {("/tail", "get"), ("/turns/{correlation_id}/stream", "get"), ("/ingress/intent", "post")}


def generate(schema_path: Path, out: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(schema_path),
            "--output-path",
            str(out / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout, done.stdout


def turn_with_generated_client(root: Path, url: str, key: str) -> Any:
    sys.path.insert(0, str(root))
    try:
        package = importlib.import_module(PACKAGE)
        ingress = importlib.import_module(f"{PACKAGE}.api.default.ingress_intent_ingress_intent_post")
        models = importlib.import_module(f"{PACKAGE}.models")
        client = package.AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
        body = models.IntentEnvelope(
            interface_version=3,
            correlation_id="c-generated-1",
            payload=models.IntentPayload(
                intent_type="chat.message",
                thread_id="th-generated",
                payload=models.IntentBody(message="hello from a generated client"),
            ),
        )
        wait = models.IngressIntentIngressIntentPostWaitType0.EXECUTION
        accepted = ingress.sync(client=client, body=body, wait=wait)
        refused = ingress.sync(
            client=client,
            body=models.JobIntent.from_dict(
                {
                    "interface_version": 3,
                    "correlation_id": "c-j",
                    "payload": {"intent_type": "case.embed", "payload": {"case_id": "none"}},
                }
            ),
            wait=None,
        )
        return accepted, refused, models
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


async def test_a_generated_client_makes_a_turn(settings, tmp_path) -> None:
    async with running_stack(settings.model_copy(update={"auth_mode": "keys"})) as stack:
        key = await asyncio.to_thread(make_key, stack.settings, "acme", "intent.write,snapshot.read")
        schema = await stack.http.get("/openapi.json")
        assert schema.status_code == 200
        (tmp_path / "openapi.json").write_text(schema.text)
        await asyncio.to_thread(generate, tmp_path / "openapi.json", tmp_path)
        url = str(stack.http.base_url).rstrip("/")
        accepted, refused, models = await asyncio.to_thread(turn_with_generated_client, tmp_path, url, key)
    assert isinstance(accepted, models.IntentAccepted), accepted
    assert accepted.correlation_id == "c-generated-1" and accepted.thread_id == "th-generated"
    assert accepted.decision.payload["decision"] == "ALLOW"
    assert accepted.execution.payload["output_text"] == "echo: hello from a generated client"
    # a refusal parses as the documented error body, with its reason code
    assert isinstance(refused, models.ErrorBody), refused
    assert refused.reason_code == "job.input_not_found"


async def test_every_route_documents_its_bodies(settings) -> None:
    async with running_stack(settings) as stack:
        schema = (await stack.http.get("/openapi.json")).json()
    for path, operations in schema["paths"].items():
        if path.startswith("/ui/"):
            continue
        for method, operation in operations.items():
            responses = operation["responses"]
            success = {code: r for code, r in responses.items() if code.startswith("2")}
            assert success, (path, method)
            for code, response in success.items():
                content = response.get("content", {})
                assert content, (path, method, code)
                for media, body in content.items():
                    assert body.get("schema"), (path, method, code, media)
            if (path, method) in SSE_ROUTES:
                assert any("text/event-stream" in r.get("content", {}) for r in success.values()), path
            assert responses["422"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
            assert "HTTPValidationError" not in str(responses)
    ingress = schema["paths"]["/ingress/intent"]["post"]
    refs = ingress["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert {r["$ref"].rsplit("/", 1)[1] for r in refs} == {"IntentEnvelope", "JobIntent"}
    assert "ChatCompletionRequest" in schema["components"]["schemas"]


async def test_unknown_routes_and_methods_answer_the_error_body(settings) -> None:
    async with running_stack(settings) as stack:
        missing = await stack.http.get("/no/such/route")
        wrong = await stack.http.delete("/snapshot")
    assert missing.status_code == 404
    assert missing.json() == {"ok": False, "reason_code": "route.not_found", "detail": "Not Found"}
    assert wrong.status_code == 405 and wrong.json()["reason_code"] == "route.method_not_allowed"
    assert "GET" in wrong.headers["allow"]


async def test_docs_load_only_packaged_assets(settings) -> None:
    async with running_stack(settings) as stack:
        page = await stack.http.get("/docs")
        assert page.status_code == 200
        assert "cdn" not in page.text.lower() and "https://" not in page.text.replace(
            "https://fastapi.tiangolo.com", ""
        )
        for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css"):
            response = await stack.http.get(asset)
            assert response.status_code == 200 and len(response.content) > 1000, asset
