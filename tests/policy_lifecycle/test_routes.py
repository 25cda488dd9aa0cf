"""`POST /policy/whatif` and `GET /policy/history` over a ledger recorded by real turns."""

from __future__ import annotations

from tests.stack import running_stack

MAX_USER = "turngate.policies.max_user_messages"
RAISING = "tests.policy_lifecycle.raising_policy"


async def test_whatif_over_http_names_the_flips(thread_ledger) -> None:
    async with running_stack(thread_ledger, worker=False) as stack:
        response = await stack.http.post("/policy/whatif", json={"module": MAX_USER})
        assert response.status_code == 200, response.text
        report = response.json()
        assert report["checked"] == 7
        denied = [f["correlation_id"] for f in report["flipped"] if f["change"] == "ALLOW -> DENY"]
        assert denied == ["c-5", "c-6"]
        one_thread = await stack.http.post("/policy/whatif", json={"module": MAX_USER, "thread_id": "none"})
        assert one_thread.json()["checked"] == 0
        history = await stack.http.get("/policy/history")
        assert [v["policy_id"] for v in history.json()["versions"]] == ["turngate.allow_all"]


async def test_only_allow_listed_policies_run(thread_ledger) -> None:
    async with running_stack(thread_ledger, worker=False) as stack:
        refused = await stack.http.post("/policy/whatif", json={"module": RAISING})
        assert refused.status_code == 403
        assert refused.json()["reason_code"] == "policy.whatif_not_allowed"
        assert (await stack.http.post("/policy/whatif", json={"module": "os:system"})).status_code == 403
        code = await stack.http.post("/policy/whatif", json={"module": MAX_USER, "source": "print(1)"})
        assert code.status_code == 422  # no field takes code
    allowed = thread_ledger.model_copy(update={"whatif_policies": f"{RAISING},other.module:X"})
    async with running_stack(allowed, worker=False) as stack:
        response = await stack.http.post("/policy/whatif", json={"module": RAISING})
        assert response.status_code == 200, response.text
        assert [e["correlation_id"] for e in response.json()["errors"]] == ["c-3"]
        missing = await stack.http.post("/policy/whatif", json={"module": "other.module", "object": "X"})
        assert missing.status_code == 422 and missing.json()["reason_code"] == "policy.load_failed"
        backwards = await stack.http.post(
            "/policy/whatif", json={"module": MAX_USER, "since": "2030-01-02", "until": "2030-01-01"}
        )
        assert backwards.status_code == 422
