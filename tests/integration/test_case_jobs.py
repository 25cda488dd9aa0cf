"""Case jobs through the API on a real stack: upload, ingest -> embed -> index, then a
chat turn with a ``case_query`` whose context holds the right chunk and whose DECISION and
manifest record the pinned index, the candidates and the exclusions; a full queue refuses with
503 and records nothing; cancel; resubmission returns the same job."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.stack import make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.jobs.cases.registry import CaseRegistry
from turngate.ledger import LedgerStore
from turngate.worker.run import running_worker

HANDBOOK = """# Handbook

## Lighthouse

The lighthouse keeper logs every passing ship in the harbour register at dusk.

## Bakery

Sourdough bread needs a living starter, flour, water and patience.
"""
VOLCANOES = "Basalt lava is hot and fluid; it flows far from the vent before it cools."


def job_intent(job_type: str, body: dict[str, Any], correlation_id: str) -> dict[str, Any]:
    return {
        "interface_version": 3,
        "correlation_id": correlation_id,
        "payload": {"intent_type": job_type, "payload": body},
    }


async def wait_job(http: httpx.AsyncClient, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    async with asyncio.timeout(timeout_s):
        while True:
            job = (await http.get(f"/jobs/{job_id}")).json()
            if job["state"] in {"completed", "failed", "cancelled", "timed_out"}:
                return job
            await asyncio.sleep(0.2)


async def submit(http: httpx.AsyncClient, job_type: str, body: dict[str, Any], cid: str) -> dict[str, Any]:
    resp = await http.post("/ingress/intent", json=job_intent(job_type, body, cid))
    assert resp.status_code == 202, resp.text
    return resp.json()


async def test_ingest_embed_index_then_a_turn_retrieves_the_right_chunk(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        http = stack.http
        upload = await http.post(
            "/artifacts",
            params={"name": "handbook.md"},
            content=HANDBOOK,
            headers={"content-type": "text/markdown"},
        )
        assert upload.status_code == 201, upload.text
        documents = [
            {"name": "handbook.md", "artifact": upload.json()["artifact"], "media_type": "text/markdown"},
            {"name": "volcanoes.txt", "text": VOLCANOES},
        ]
        chunking = {"size": 100, "overlap": 0}  # one chunk per section
        ingest_body = {"case_id": "handbook", "documents": documents, "chunking": chunking}
        ingest = await submit(http, "case.ingest", ingest_body, "c-ingest")
        assert ingest["job_type"] == "case.ingest" and ingest["deduplicated"] is False
        done = await wait_job(http, ingest["job_id"])
        assert done["state"] == "completed", done
        assert done["progress"] == 100.0 and done["result"]["documents"] == 2

        again = await submit(http, "case.ingest", ingest_body, "c-ingest")
        assert again["job_id"] == ingest["job_id"] and again["deduplicated"] is True

        embed = await submit(http, "case.embed", {"case_id": "handbook"}, "c-embed")
        assert (await wait_job(http, embed["job_id"]))["state"] == "completed"
        index = await submit(http, "case.index", {"case_id": "handbook"}, "c-index")
        indexed = await wait_job(http, index["job_id"])
        assert indexed["state"] == "completed", indexed

        case = (await http.get("/cases/handbook")).json()
        version = case["latest"]["index"]["version"]
        assert version == indexed["result"]["index_version"]
        assert [r["kind"] for r in case["records"]] == ["index", "embeddings", "chunks"]
        assert case["latest"]["index"]["detail"]["embedder"]["kind"] == "offline"

        jobs = (await http.get("/jobs")).json()["jobs"]
        assert {j["id"] for j in jobs} == {ingest["job_id"], embed["job_id"], index["job_id"]}
        for listed in jobs:  # the list and the job itself count items the same way
            one = (await http.get(f"/jobs/{listed['id']}")).json()
            assert (one["items_done"], one["items_total"]) == (listed["items_done"], listed["items_total"])
        counts = {j["type"]: j["items_total"] for j in jobs}
        assert counts["case.ingest"] == 2  # documents; embed and index count chunks
        assert counts["case.embed"] == counts["case.index"] == indexed["result"]["chunk_count"]
        status = (await http.get("/status")).json()["job_runtime"]
        assert status["queue_sizes"]["case.embed"] == 0 and status["active_counts"]["case.index"] == 0
        assert status["queue_max"]["case.ingest"] == settings.job_queue_max

        query = {
            "ref_type": "case_query",
            "case_id": "handbook",
            "query": "lighthouse keeper ships",
            "top_k": 1,
        }
        resp = await stack.chat(
            "Who logs the ships?",
            correlation_id="c-ask",
            declared_refs=[query],
            inputs={"debug_snapshot": True},
        )
        assert resp.status_code == 202, resp.text

    body = resp.json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    (record,) = decision["external_context"]
    assert record["index_version"] == version and len(record["selected_chunk_ids"]) == 1
    store = open_artifact_store(settings.effective_artifacts)
    manifest = json.loads(store.get(decision["manifest"]["artifact_id"]))
    (external,) = manifest["external_refs"]
    assert len(external["candidates"] if "candidates" in external else external["candidate_chunk_ids"]) >= 2
    assert {e["excluded_reason"] for e in manifest["exclusion_log"]} >= {"over_top_k"}
    # The manifest names what ranked the candidates (both steps).
    execution_manifest = json.loads(store.get(body["execution"]["payload"]["manifest"]["artifact_id"]))
    for step in (manifest, execution_manifest):
        assert (step["reranker_model"], step["reranker_version"]) == ("hybrid-linear", "1")
    prompt = json.loads(
        store.get(body["execution"]["payload"]["fault_snapshots"]["prompt_snapshot"]["artifact_id"])
    )
    context = prompt["messages"][-2]["content"]
    assert "lighthouse keeper logs every passing ship" in context
    assert "Sourdough" not in context and "Basalt" not in context


async def test_a_full_queue_refuses_with_503_and_records_nothing_then_cancel(
    tmp_path, temporal_server
) -> None:
    settings = make_settings(tmp_path, temporal_server.address, job_queue_max=1)
    store = open_artifact_store(settings.effective_artifacts)
    first_docs = [{"name": "a.txt", "text": "alpha beta gamma"}]
    async with running_stack(settings, worker=False) as stack:  # no worker: the first job stays queued
        http = stack.http
        first = await submit(http, "case.ingest", {"case_id": "q", "documents": first_docs}, "c-first")
        stored = len(list(store.iter_artifacts()))
        async with asyncio.timeout(20):  # visibility is eventually consistent
            while True:
                refused = await http.post(
                    "/ingress/intent",
                    json=job_intent(
                        "case.ingest", {"case_id": "q", "documents": [{"name": "b.txt", "text": "b"}]}, "c-2"
                    ),
                )
                if refused.status_code == 503:
                    break
                assert refused.status_code == 202
                await http.delete(f"/jobs/{refused.json()['job_id']}")  # not the test's job: drop it
                await asyncio.sleep(0.2)
        assert refused.json()["reason_code"] == "queue.full"
        assert refused.headers["retry-after"] == "5"
        assert len(list(store.iter_artifacts())) == stored  # the refused document was not stored
        listed = (await http.get("/jobs", params={"open": "true"})).json()["jobs"]
        assert first["job_id"] in {j["id"] for j in listed}

        cancel = await http.delete(f"/jobs/{first['job_id']}")
        assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
        async with running_worker(settings):  # the worker sees the cancel before any work
            job = await wait_job(http, first["job_id"], timeout_s=30)
        assert job["state"] == "cancelled"
        assert (await http.delete(f"/jobs/{first['job_id']}")).json()["reason_code"] == "job.finished"
        assert (await http.get("/jobs/job-ingest-nope")).status_code == 404
        assert (await http.get("/cases/q")).json()["reason_code"] == "case.not_found"
    with LedgerStore(settings.effective_ledger_url) as ledger:
        assert ledger.head()[0] == 0  # jobs never write ledger events
        assert CaseRegistry(ledger.engine).records(tenant_id=None, case_id="q") == []


async def test_job_inputs_are_checked_before_anything_starts(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings, worker=False) as stack:
        http = stack.http
        embed = await http.post("/ingress/intent", json=job_intent("case.embed", {"case_id": "none"}, "c-e"))
        assert embed.status_code == 422 and embed.json()["reason_code"] == "job.input_not_found"
        both = {"name": "x", "text": "a", "content_base64": "YQ=="}
        bad = await http.post(
            "/ingress/intent", json=job_intent("case.ingest", {"case_id": "c", "documents": [both]}, "c-b")
        )
        assert bad.status_code == 422 and bad.json()["reason_code"] == "admission.invalid_value"
        url = {"case_id": "c", "embedder": {"kind": "openai", "base_url": "http://169.254.169.254"}}
        ssrf = await http.post("/ingress/intent", json=job_intent("case.embed", url, "c-u"))
        assert ssrf.status_code == 422 and "base_url" in ssrf.json()["detail"]
        empty = await http.post("/artifacts", content=b"")
        assert empty.status_code == 422 and empty.json()["reason_code"] == "admission.empty_upload"
        assert (await http.get("/jobs")).json() == {"jobs": []}
