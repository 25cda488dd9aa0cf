"""Tenant isolation for case jobs: tenant B cannot see, list, cancel or query tenant A's jobs and
cases, and a case_query naming A's case (even by its index version) finds nothing; the same
correlation id names a different job per tenant; a snapshot.read key cannot submit or cancel."""

from __future__ import annotations

from tests.integration.test_case_jobs import job_intent, wait_job
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, running_stack
from turngate.settings import Settings

DOCS = [{"name": "a.txt", "text": "The lighthouse keeper logs ships at dusk."}]


async def test_tenant_b_cannot_reach_tenant_a_jobs_or_cases(secure_settings: Settings) -> None:
    a = make_key(secure_settings, "tenant-a", "intent.write,snapshot.read")
    b = make_key(secure_settings, "tenant-b", "intent.write,snapshot.read")
    reader = make_key(secure_settings, "tenant-a", "snapshot.read")
    async with running_stack(secure_settings) as stack:
        http = stack.http

        async def run(key: str, job_type: str, body: dict, cid: str) -> dict:
            resp = await http.post(
                "/ingress/intent", json=job_intent(job_type, body, cid), headers=bearer(key)
            )
            assert resp.status_code == 202, resp.text
            job = resp.json()
            http.headers.update(bearer(key))
            done = await wait_job(http, job["job_id"])
            assert done["state"] == "completed", done
            assert done["tenant_id"] == ("tenant-a" if key == a else "tenant-b")
            return job

        ingest = await run(a, "case.ingest", {"case_id": "secret", "documents": DOCS}, "c-1")
        await run(a, "case.embed", {"case_id": "secret"}, "c-2")
        await run(a, "case.index", {"case_id": "secret"}, "c-3")
        case = await http.get("/cases/secret", headers=bearer(a))
        version = case.json()["latest"]["index"]["version"]

        # B: the job, the list, the case, a cancel: all as if absent
        got = await http.get(f"/jobs/{ingest['job_id']}", headers=bearer(b))
        assert got.status_code == 404 and got.json()["reason_code"] == "job.not_found"
        assert (await http.get("/jobs", headers=bearer(b))).json() == {"jobs": []}
        assert (await http.delete(f"/jobs/{ingest['job_id']}", headers=bearer(b))).status_code == 404
        assert (await http.get("/cases/secret", headers=bearer(b))).json()["reason_code"] == "case.not_found"
        assert len((await http.get("/jobs", headers=bearer(a))).json()["jobs"]) == 3

        # B's jobs cannot start from A's outputs, and the same correlation id is B's own job
        embed = await http.post(
            "/ingress/intent", json=job_intent("case.embed", {"case_id": "secret"}, "c-2"), headers=bearer(b)
        )
        assert embed.status_code == 422 and embed.json()["reason_code"] == "job.input_not_found"
        mine = await run(b, "case.ingest", {"case_id": "secret", "documents": DOCS}, "c-1")
        assert mine["job_id"] != ingest["job_id"] and mine["deduplicated"] is False

        # B's turn naming A's case and pinned version: DENIED as not found
        ref = {"ref_type": "case_query", "case_id": "secret", "query": "lighthouse", "index_version": version}
        turn = await http.post(
            "/ingress/intent",
            params={"wait": "execution"},
            json=envelope("what does the keeper do?", correlation_id="c-turn-b", declared_refs=[ref]),
            headers=bearer(b),
        )
        decision = turn.json()["decision"]["payload"]
        assert decision["decision"] == "DENY" and "case_query.index_not_found" in decision["reason_codes"]

        # roles: a reader may look but not submit or cancel
        refused = await http.post(
            "/ingress/intent",
            json=job_intent("case.index", {"case_id": "secret"}, "c-9"),
            headers=bearer(reader),
        )
        assert refused.status_code == 403
        assert (await http.delete(f"/jobs/{ingest['job_id']}", headers=bearer(reader))).status_code == 403
        assert (await http.get(f"/jobs/{ingest['job_id']}", headers=bearer(reader))).status_code == 200
        assert (await http.post("/artifacts", content=b"x", headers=bearer(reader))).status_code == 403
