"""The keyless read-only mode (TURNGATE_KEYLESS_READ): off by default, every route without a key
is 401; on, GET /snapshot, /tail, /status and /capabilities answer without a key (as the
published DBL gateway's observer clients expect), every other route still says 401, the mode is
a warning in the log and in /status, and keyless readers are limited per client address."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.devserver import DevServer
from turngate.settings import Settings

KEYLESS = ("/snapshot", "/status", "/capabilities")


@pytest.fixture
def keyless_settings(tmp_path: Path, temporal_server: DevServer) -> Settings:
    return make_settings(tmp_path, temporal_server.address, auth_mode="keys", keyless_read=True)


def test_the_mode_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNGATE_KEYLESS_READ", raising=False)
    assert Settings().keyless_read is False


async def test_off_by_default_the_read_routes_need_a_key(secure_settings: Settings) -> None:
    assert secure_settings.keyless_read is False
    async with running_stack(secure_settings, worker=False) as stack:
        for path in (*KEYLESS, "/tail"):
            response = await stack.http.get(path)
            assert response.status_code == 401, path
            assert response.json()["reason_code"] == "auth.missing"
        status = await stack.http.get("/status", headers=bearer(make_key(secure_settings, "*", "admin")))
        assert status.json()["auth"] == {"mode": "keys", "keyless_read": False}


async def test_on_the_four_read_routes_answer_without_a_key_and_nothing_else_does(
    keyless_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="turngate.api.app"):
        async with running_stack(keyless_settings, worker=False) as stack:
            for path in KEYLESS:
                response = await stack.http.get(path)
                assert response.status_code == 200, (path, response.text)
            async with stack.http.stream("GET", "/tail", params={"backlog": 0}) as tail:
                assert tail.status_code == 200
                assert tail.headers["content-type"].startswith("text/event-stream")

            status = (await stack.http.get("/status")).json()
            assert status["auth"]["keyless_read"] is True
            assert "keyless read-only mode is on" in status["auth"]["warning"]
            assert "address" not in status["temporal"]  # a keyless reader is no operator
            caps = (await stack.http.get("/capabilities")).json()
            assert caps["auth"]["keyless_read"] == ["/capabilities", "/snapshot", "/status", "/tail"]

            refused = [
                ("POST", "/ingress/intent", envelope("hi", correlation_id="c-1")),
                ("GET", "/verify", None),
                ("GET", "/jobs", None),
                ("GET", "/turns/c-1/stream", None),
                ("GET", "/policy/history", None),
                ("GET", "/metrics", None),
                ("GET", "/v1/models", None),
                ("POST", "/v1/chat/completions", {"model": "echo", "messages": []}),
            ]
            for method, path, body in refused:
                response = await stack.http.request(method, path, json=body)
                assert response.status_code == 401, (method, path, response.text)
                assert response.json()["reason_code"] == "auth.missing"
            # A bad key is still refused on a keyless route: the mode is for no key, not any key.
            bad = await stack.http.get("/snapshot", headers=bearer("tgk_000000000000_not-a-real-key"))
            assert bad.status_code == 401 and bad.json()["reason_code"] == "auth.invalid"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("KEYLESS READ-ONLY MODE IS ON" in w and "every tenant" in w for w in warnings), warnings


async def test_a_keyless_tenant_reads_that_tenant_only(tmp_path: Path, temporal_server: DevServer) -> None:
    settings = make_settings(
        tmp_path, temporal_server.address, auth_mode="keys", keyless_read=True, keyless_read_tenant="acme"
    )
    writers = {tenant: make_key(settings, tenant, "intent.write") for tenant in ("acme", "globex")}
    async with running_stack(settings) as stack:
        for tenant, key in writers.items():
            body = envelope("hi", correlation_id=f"c-{tenant}", thread_id=f"t-{tenant}", turn_id="1")
            answer = await stack.http.post("/ingress/intent", json=body, headers=bearer(key))
            assert answer.status_code == 202, answer.text
        events = (await stack.http.get("/snapshot")).json()["events"]
    assert events and {e["thread_id"] for e in events} == {"t-acme"}


async def test_keyless_readers_are_rate_limited_per_address(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    settings = make_settings(
        tmp_path,
        temporal_server.address,
        auth_mode="keys",
        keyless_read=True,
        rate_limit_burst=3,
        rate_limit_per_s=0.01,
    )
    async with running_stack(settings, worker=False) as stack:
        codes = [(await stack.http.get("/capabilities")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        # An API key has a bucket of its own.
        key = make_key(settings, "acme", "snapshot.read")
        assert (await stack.http.get("/capabilities", headers=bearer(key))).status_code == 200
