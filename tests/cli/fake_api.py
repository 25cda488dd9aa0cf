"""An in-memory fake of the case-job HTTP API, for the CLI tests.

Jobs advance one step per ``GET /jobs/{id}``: queued -> running 0/4 -> running 2/4 -> final.
``fail[job_type] = {"type", "message"}`` makes that type end ``failed``; ``queue_full_next = n``
refuses the next n submissions with 503 ``queue.full`` and ``Retry-After: retry_after``.
Every request is recorded in ``requests`` as (method, path, detail).
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

API_KEY = "test-key"
ITEMS = 4


def _error(status: int, reason_code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"ok": False, "reason_code": reason_code, "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


class FakeJobsApi:
    def __init__(self) -> None:
        self.app = self._build_app()
        self.reset()

    def reset(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, int] = {}
        self.uploads: list[dict[str, Any]] = []
        self.intents: list[dict[str, Any]] = []
        self.records: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.fail: dict[str, dict[str, str]] = {}
        self.queue_full_next = 0
        self.retry_after = "0"
        self.chat_decision: str | None = "ALLOW"  # None: the API stopped waiting before a DECISION
        self.max_upload_bytes = 1_000_000

    # ------------------------------------------------------------------ job model

    def _advance(self, job: dict[str, Any]) -> None:
        if job["state"] in ("completed", "failed", "cancelled", "timed_out"):
            return
        step = self.steps[job["id"]] = self.steps[job["id"]] + 1
        job["items_total"] = ITEMS
        if step == 1:
            job.update(state="running", started_at="2025-01-01T00:00:01Z")
        elif step == 2:
            job.update(items_done=ITEMS // 2, progress=50.0)
        else:
            job["finished_at"] = "2025-01-01T00:00:09Z"
            if job["type"] in self.fail:
                job.update(state="failed", error=dict(self.fail[job["type"]]))
            else:
                job.update(state="completed", items_done=ITEMS, progress=100.0, result=self._complete(job))

    def _complete(self, job: dict[str, Any]) -> dict[str, Any]:
        kind, field = {
            "case.ingest": ("chunks", "chunks"),
            "case.embed": ("embeddings", "embeddings"),
            "case.index": ("index", "index"),
        }[job["type"]]
        version = f"{kind}-v{len(self.records.get(job['case_id'], [])) + 1}"
        pointer = {"artifact_id": f"a-{version}", "sha256": hashlib.sha256(version.encode()).hexdigest()}
        record = {
            "kind": kind,
            "job_id": job["id"],
            "version": version,
            "pointer": pointer,
            "detail": {},
            "created_at": job["finished_at"],
        }
        self.records.setdefault(job["case_id"], []).insert(0, record)
        result: dict[str, Any] = {"case_id": job["case_id"], field: pointer, "chunk_count": ITEMS}
        if kind == "index":
            result["index_version"] = version
        return result

    def _latest(self, case_id: str, kind: str) -> dict[str, Any] | None:
        return next((r for r in self.records.get(case_id, []) if r["kind"] == kind), None)

    def add_job(self, job_type: str, case_id: str, state: str = "queued") -> dict[str, Any]:
        job_id = f"j-{len(self.jobs) + 1}"
        job = {
            "id": job_id,
            "type": job_type,
            "case_id": case_id,
            "state": state,
            "progress": 100.0 if state == "completed" else 0.0,
            "items_done": 0,
            "items_total": 0,
            "submitted_at": f"2025-01-01T00:00:{len(self.jobs):02d}Z",
            "started_at": None,
            "finished_at": None,
            "error": None,
            "result": None,
        }
        self.jobs[job_id] = job
        self.steps[job_id] = 0
        return job

    def _chat_answer(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """A `chat.message` turn's answer: its DECISION (``chat_decision``) and, on ALLOW, an EXECUTION."""
        cid = envelope["correlation_id"]
        body: dict[str, Any] = {"thread_id": "t-1", "turn_id": cid, "correlation_id": cid, "index": 0}
        if self.chat_decision is None:
            return body | {"decision": None, "execution": None, "wait_timed_out": True}
        reasons = [] if self.chat_decision == "ALLOW" else ["policy.denied"]
        body["decision"] = {"payload": {"decision": self.chat_decision, "reason_codes": reasons}}
        body["execution"] = {"payload": {"output_text": "hi"}} if self.chat_decision == "ALLOW" else None
        return body

    # ------------------------------------------------------------------ routes

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def auth_and_record(request: Request, call_next: Any) -> Any:
            self.requests.append((request.method, request.url.path, dict(request.query_params)))
            if request.headers.get("authorization") != f"Bearer {API_KEY}":
                return _error(401, "auth.missing_key", "no or wrong bearer token")
            return await call_next(request)

        @app.post("/artifacts")
        async def upload(request: Request, name: str) -> Any:
            body = await request.body()
            if len(body) > self.max_upload_bytes:
                return _error(
                    413, "admission.payload_too_large", f"{len(body)} bytes > {self.max_upload_bytes}"
                )
            sha = hashlib.sha256(body).hexdigest()
            pointer = {
                "artifact_id": f"a-{sha[:8]}",
                "path": f"uploads/{sha}",
                "sha256": sha,
                "size_bytes": len(body),
            }
            self.uploads.append(
                {"name": name, "content_type": request.headers.get("content-type"), "body": body}
            )
            return JSONResponse({"artifact": pointer}, status_code=201)

        @app.post("/ingress/intent")
        async def intent(request: Request) -> Any:
            envelope = await request.json()
            self.intents.append(envelope)
            intent_type = envelope["payload"]["intent_type"]
            body = envelope["payload"]["payload"]
            self.requests[-1] = ("POST", "/ingress/intent", intent_type)
            if intent_type == "chat.message":
                return self._chat_answer(envelope)
            if self.queue_full_next:
                self.queue_full_next -= 1
                return _error(503, "queue.full", "jobs queue full", {"Retry-After": self.retry_after})
            needs = {"case.embed": "chunks", "case.index": "embeddings"}.get(intent_type)
            if needs and self._latest(body["case_id"], needs) is None:
                return _error(422, "job.input_not_found", f"case {body['case_id']} has no {needs} yet")
            job = self.add_job(intent_type, body["case_id"])
            accepted = {
                "accepted": True,
                "job_id": job["id"],
                "job_type": intent_type,
                "case_id": job["case_id"],
            }
            accepted |= {"state": "queued", "deduplicated": False, "status_url": f"/jobs/{job['id']}"}
            return JSONResponse(accepted, status_code=202)

        @app.get("/jobs")
        async def list_jobs(type: str | None = None, open: bool = False, limit: int = 50) -> Any:
            jobs = [j for j in reversed(self.jobs.values()) if type in (None, j["type"])]
            if open:
                jobs = [j for j in jobs if j["state"] in ("queued", "running")]
            return {"jobs": jobs[:limit]}

        @app.get("/jobs/{job_id}")
        async def get_job(job_id: str) -> Any:
            if job_id not in self.jobs:
                return _error(404, "job.not_found", f"no job {job_id}")
            self._advance(self.jobs[job_id])
            return self.jobs[job_id]

        @app.delete("/jobs/{job_id}")
        async def cancel_job(job_id: str) -> Any:
            job = self.jobs.get(job_id)
            if job is None:
                return _error(404, "job.not_found", f"no job {job_id}")
            if job["state"] not in ("queued", "running"):
                return _error(409, "job.finished", f"job {job_id} is already {job['state']}")
            answer = {"cancel_requested": True, "job": dict(job)}
            job.update(state="cancelled", error={"type": "job.cancelled", "message": "cancelled by request"})
            return JSONResponse(answer, status_code=202)

        @app.get("/cases/{case_id}")
        async def get_case(case_id: str) -> Any:
            if case_id not in self.records:
                return _error(404, "case.not_found", f"no case {case_id}")
            latest = {kind: self._latest(case_id, kind) for kind in ("chunks", "embeddings", "index")}
            return {"case_id": case_id, "latest": latest, "records": self.records[case_id]}

        return app
