"""`POST /policy/whatif` and `GET /policy/history` over a ledger recorded by real turns."""

from __future__ import annotations

from tests.security.conftest import bearer, make_key
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


async def test_keys_admin_only_and_a_tenant_key_sees_its_tenant(thread_ledger) -> None:
    # The thread was recorded without authentication (no tenant): an operator key ('*') sees it,
    # an admin key of tenant acme sees none of it, a snapshot reader may not run a what-if.
    settings = thread_ledger.model_copy(update={"auth_mode": "keys"})
    operator = make_key(settings, "*", "admin")
    acme = make_key(settings, "acme", "admin")
    reader = make_key(settings, "*", "snapshot.read")
    body = {"module": MAX_USER}
    async with running_stack(settings, worker=False) as stack:
        everyone = await stack.http.post("/policy/whatif", json=body, headers=bearer(operator))
        assert everyone.status_code == 200 and everyone.json()["checked"] == 7
        scoped = await stack.http.post("/policy/whatif", json=body, headers=bearer(acme))
        assert scoped.status_code == 200 and scoped.json()["checked"] == 0
        assert scoped.json()["query"]["tenant_id"] == "acme"
        other = await stack.http.post(
            "/policy/whatif", json=body | {"tenant_id": "globex"}, headers=bearer(acme)
        )
        assert other.status_code == 403 and other.json()["reason_code"] == "auth.forbidden"
        refused = await stack.http.post("/policy/whatif", json=body, headers=bearer(reader))
        assert refused.status_code == 403
        history = await stack.http.get("/policy/history", headers=bearer(acme))
        assert history.json()["versions"] == []
