"""context_digest covers every declared ref: what a Workbench handle resolved to is inside the
digest (context spec version 2), and DECISIONs recorded under version 1 still verify (real stack,
a Workbench resolver on loopback whose document changes between two turns, `turngate verify` as
a child process)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.faults.size_helpers import run_verify
from tests.security.fake_resolver import LOOPBACK_ALLOWED_ENV
from tests.stack import make_settings, running_stack
from turngate.core.context import (
    CONTEXT_SPEC_SCHEMA_V1,
    CONTEXT_SPEC_SCHEMA_V2,
    build_context,
    load_context_config,
)
from turngate.core.decision import decide, verify_decision
from turngate.core.events import Event, EventDraft, EventKind
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore

HANDLE = {"ref_type": "artifact.handle", "ref_id": "doc", "kind": "note"}


class _Document(BaseHTTPRequestHandler):
    server: Resolver

    def log_message(self, *_args: object) -> None:
        return

    def do_GET(self) -> None:
        body = self.server.content
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Resolver(ThreadingHTTPServer):
    """Serves one document, whose content a test changes between turns."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Document)
        self.content = b""


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    server = Resolver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("ALLOW_HANDLE_CONTENT_FETCH", "true")
    monkeypatch.setenv("WORKBENCH_RESOLVER_URL", f"http://127.0.0.1:{server.server_port}/h")
    monkeypatch.setenv("WORKBENCH_ADMIT_KINDS", "note")
    monkeypatch.setenv("WORKBENCH_DENY_NETWORKS", LOOPBACK_ALLOWED_ENV)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def turn_body(stream: str) -> dict[str, Any]:
    """The same thread, turn and message on two streams: only the fetched document differs."""
    return {
        "interface_version": 3,
        "correlation_id": f"c-{stream}",
        "payload": {
            "stream_id": stream,
            "intent_type": "chat.message",
            "thread_id": "t",
            "turn_id": "1",
            "declared_refs": [HANDLE],
            "payload": {"message": "summarise the note"},
        },
    }


def as_event(record: dict[str, Any]) -> Event:
    return Event.model_validate(record)


async def test_fetched_content_is_inside_the_digest_and_both_versions_verify(
    tmp_path, temporal_server, resolver
) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        decided = {}
        for stream, content in (("s1", b"alpha document"), ("s2", b"beta document")):
            resolver.content = content
            answer = await stack.http.post(
                "/ingress/intent", params={"wait": "execution"}, json=turn_body(stream)
            )
            assert answer.status_code == 202, answer.text
            decided[stream] = answer.json()["decision"]
        snapshot = (await stack.http.get("/snapshot")).json()
    first, second = decided["s1"]["payload"], decided["s2"]["payload"]
    assert first["decision"] == second["decision"] == "ALLOW"
    for payload in (first, second):
        assert payload["context_spec"]["assembly_rules"]["schema_version"] == CONTEXT_SPEC_SCHEMA_V2
        assert payload["external_context"][0]["reason_code"] == "workbench.fetched"
    assert first["external_context"][0]["content_sha256"] != second["external_context"][0]["content_sha256"]
    # Same declared refs, different resolution: different digests.
    scope_1, scope_2 = first["context_spec"]["external_refs"], second["context_spec"]["external_refs"]
    assert scope_1["declared"] == scope_2["declared"] and len(scope_1["declared"]) == 1
    assert scope_1["resolved"] != scope_2["resolved"]
    assert first["context_digest"] != second["context_digest"]
    # For one INTENT, version 1's digest is the same whatever its handle resolved to (the gap);
    # version 2's follows the resolution.
    intents = {e["correlation_id"]: as_event(e) for e in snapshot["events"] if e["kind"] == "INTENT"}
    cfg = load_context_config()
    by_version = {
        version: {
            build_context(
                intents["c-s1"], [], cfg, schema_version=version, external_resolved=resolved
            ).context_digest
            for resolved in (first["external_context"], second["external_context"])
        }
        for version in (CONTEXT_SPEC_SCHEMA_V1, CONTEXT_SPEC_SCHEMA_V2)
    }
    assert len(by_version[CONTEXT_SPEC_SCHEMA_V1]) == 1
    assert len(by_version[CONTEXT_SPEC_SCHEMA_V2]) == 2
    assert first["context_digest"] in by_version[CONTEXT_SPEC_SCHEMA_V2]
    # Swapping in the other turn's resolution is caught by the recomputation.
    swapped = first | {"external_context": second["external_context"]}
    assert verify_decision(swapped, intents["c-s1"], [], cfg) == [
        "context_digest differs from the recomputation"
    ]

    # A DECISION recorded under version 1 (as every turn before this version was) sits in the
    # same ledger; `turngate verify` recomputes each DECISION under the version it names.
    policy = load_policy("turngate.policies.allow_all", "POLICY")
    with LedgerStore(settings.effective_ledger_url) as ledger:
        old = ledger.append(
            EventDraft(
                kind=EventKind.INTENT,
                thread_id="t-old",
                turn_id="1",
                correlation_id="c-old",
                payload={"declared_refs": [HANDLE], "payload": {"message": "recorded before v2"}},
            )
        )
        outcome = decide(old, [], cfg, policy, schema_version=CONTEXT_SPEC_SCHEMA_V1)
        assert "external_refs" not in outcome.payload["context_spec"]
        ledger.append(
            EventDraft(
                kind=EventKind.DECISION,
                thread_id="t-old",
                turn_id="1",
                correlation_id="c-old",
                payload=outcome.payload,
            )
        )
    code, report = run_verify(settings)
    assert code == 0 and report["ok"] is True, report["failures"]
    assert report["checked_decisions"] == 3
    assert report["checked_artifacts"] >= 2  # the fetched documents are re-hashed
