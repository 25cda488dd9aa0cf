"""Every route of the OpenAPI schema refuses a request without credentials (401), with a bad
key (401) and with a key lacking the route's role (403), except the explicit public allow-list.

Table-driven over the app's own OpenAPI document: a route added later is covered without
touching this file (and, not being in turngate.security.routes, it needs ``admin``)."""

from __future__ import annotations

import re

import httpx

from tests.security.conftest import bearer, make_key
from tests.stack import running_stack
from turngate.security.principal import ROLE_ADMIN, ROLE_INTENT_WRITE, ROLE_REVIEW, ROLE_SNAPSHOT_READ
from turngate.security.routes import AUTHENTICATED, OPERATOR, PUBLIC, required_role
from turngate.settings import Settings

#: The only API routes anyone may call without a key. Adding one is a decision: change it here.
PUBLIC_ALLOW_LIST = {"/healthz"}

#: For each role, a key holding every other non-admin role (so lacking exactly that one).
WRONG_ROLES = {
    ROLE_INTENT_WRITE: ROLE_SNAPSHOT_READ,
    ROLE_SNAPSHOT_READ: ROLE_INTENT_WRITE,
    ROLE_ADMIN: f"{ROLE_INTENT_WRITE},{ROLE_SNAPSHOT_READ}",
    ROLE_REVIEW: f"{ROLE_INTENT_WRITE},{ROLE_SNAPSHOT_READ}",
    OPERATOR: ROLE_ADMIN,  # an admin of tenant acme: not an operator
}


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


async def _call(http: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    kwargs = {"json": {}} if method in {"post", "put", "patch"} else {}
    return await http.request(method.upper(), _concrete(path), headers=headers, timeout=10, **kwargs)


def _operations(schema: dict) -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, item in schema["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    ]


async def test_every_route_refuses_missing_bad_and_wrong_role_credentials(secure_settings: Settings) -> None:
    wrong_keys = {role: make_key(secure_settings, "acme", roles) for role, roles in WRONG_ROLES.items()}
    async with running_stack(secure_settings, worker=False) as stack:
        schema = (await stack.http.get("/openapi.json")).json()
        operations = _operations(schema)
        paths = {path for _, path in operations}
        assert {"/ingress/intent", "/snapshot", "/tail", "/verify", "/status", "/capabilities"} <= paths
        assert {p for p in paths if required_role(p) == PUBLIC} == PUBLIC_ALLOW_LIST

        checked = []
        for method, path in operations:
            role = required_role(path, method)
            if role == PUBLIC:
                continue
            missing = await _call(stack.http, method, path, {})
            assert missing.status_code == 401, (method, path, missing.text)
            assert missing.json()["reason_code"] == "auth.missing"
            assert missing.headers["www-authenticate"].startswith("Bearer")

            bad = await _call(stack.http, method, path, bearer("tgk_000000000000_not-a-real-key"))
            assert bad.status_code == 401, (method, path)
            assert bad.json()["reason_code"] == "auth.invalid"
            assert "not-a-real-key" not in bad.text

            basic = await _call(stack.http, method, path, {"Authorization": "Basic dXNlcjpwdw=="})
            assert basic.status_code == 401 and basic.json()["reason_code"] == "auth.invalid"

            if role != AUTHENTICATED:
                wrong = await _call(stack.http, method, path, bearer(wrong_keys[role]))
                assert wrong.status_code == 403, (method, path, wrong.text)
                body = wrong.json()
                assert body == {"ok": False, "reason_code": "auth.forbidden", "detail": body["detail"]}
            checked.append((method, path))
        assert len(checked) == len(operations) - len(PUBLIC_ALLOW_LIST)

        # Routes outside the schema: /metrics (every tenant's aggregates) is for operators, so a
        # tenant's own admin is refused too; the docs are public by design.
        assert (await stack.http.get("/metrics")).status_code == 401
        for lacking in (ROLE_ADMIN, OPERATOR):
            metrics = await stack.http.get("/metrics", headers=bearer(wrong_keys[lacking]))
            assert (metrics.status_code, metrics.json()["reason_code"]) == (403, "auth.forbidden")
        operator = make_key(secure_settings, "*", ROLE_ADMIN)
        assert (await stack.http.get("/metrics", headers=bearer(operator))).status_code == 200
        assert (await stack.http.get("/openapi.json")).status_code == 200


async def test_public_routes_answer_without_credentials_but_refuse_a_bad_key(
    secure_settings: Settings,
) -> None:
    async with running_stack(secure_settings, worker=False) as stack:
        health = await stack.http.get("/healthz")
        assert health.status_code == 200 and health.json()["ok"] is True
        bad = await stack.http.get("/healthz", headers=bearer("tgk_nope"))
        assert bad.status_code == 401


async def test_the_right_role_gets_in_and_revocation_is_immediate_without_the_key_cache(
    secure_settings: Settings,
) -> None:
    from turngate.ledger import LedgerStore
    from turngate.security.keys import KeyStore

    secure_settings = secure_settings.model_copy(update={"auth_key_cache_s": 0.0})
    with LedgerStore(secure_settings.effective_ledger_url) as ledger:
        created = KeyStore(ledger.engine).create("acme", "snapshot.read")
    async with running_stack(secure_settings, worker=False) as stack:
        ok = await stack.http.get("/snapshot", headers=bearer(created.secret))
        assert ok.status_code == 200 and ok.json()["length"] == 0
        caps = await stack.http.get("/capabilities", headers=bearer(created.secret))
        assert caps.status_code == 200 and caps.json()["auth"]["mode"] == "keys"
        with LedgerStore(secure_settings.effective_ledger_url) as ledger:
            assert KeyStore(ledger.engine).revoke(created.key.key_id)
        gone = await stack.http.get("/snapshot", headers=bearer(created.secret))
        assert gone.status_code == 401 and gone.json()["reason_code"] == "auth.invalid"


async def test_ui_static_files_are_public_and_ui_json_routes_need_snapshot_read(
    secure_settings: Settings,
) -> None:
    """The web UI (if mounted): its static files are public; any JSON route under /ui/ is
    covered by the table test above with the snapshot.read role."""
    from turngate.security.routes import UI_PREFIX

    assert required_role(f"{UI_PREFIX}api/anything") == ROLE_SNAPSHOT_READ
    assert required_role("/a-route-nobody-listed") == ROLE_ADMIN
    async with running_stack(secure_settings, worker=False) as stack:
        page = await stack.http.get("/ui/", follow_redirects=True)
        assert page.status_code in (200, 404)  # 404 only while the UI is not mounted
        assert page.status_code != 401
