"""The all-in-one image (`docker build --target allinone`), as processes: no container runtime runs
where the tests run, so its entry command (ENTRYPOINT + CMD) runs with the stage's environment,
only the data directory, the ports and the listening address moved (to a temporary directory,
free ports and loopback). It answers what the published DBL gateway's quick start does: `/healthz`,
`/capabilities` without a key and a recorded DENY `gateway.observer_mode`; with a policy set, a
client written only from the specification (no key, Example 1's refs by the ids it has) gets the
earlier answer into its second turn, end to end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.deploy.conftest import ROOT
from tests.deploy.test_dockerfile import _stages
from tests.processes import wait_http
from turngate.devserver import free_port

SRC = ROOT / "src"


def allinone_stage() -> dict[str, Any]:
    """The stage's ENV, ENTRYPOINT and CMD, and the stage it copies its environment from."""
    [stage] = [s for s in _stages() if s[0][1].endswith(" AS allinone")]
    env: dict[str, str] = {}
    for name, args in stage:
        if name == "ENV":
            for part in args.split():
                key, _, value = part.partition("=")
                env[key] = value
    values = dict(stage)
    return {
        "env": env,
        "entrypoint": json.loads(values["ENTRYPOINT"]),
        "cmd": json.loads(values["CMD"]),
        "copies": [args for name, args in stage if name == "COPY"],
    }


def test_the_stage_is_built_with_the_devserver_extra_and_runs_dev_as_an_observer() -> None:
    stage = allinone_stage()
    assert stage["copies"] == ["--from=build-allinone /opt/turngate /opt/turngate"]
    [builder] = [s for s in _stages() if s[0][1] == "build AS build-allinone"]
    assert ("RUN", '/opt/turngate/bin/pip install ".[devserver]"') in builder
    assert "devserver = [" in (ROOT / "pyproject.toml").read_text()
    assert stage["entrypoint"] == ["turngate"]
    assert stage["cmd"][:2] == ["dev", "--observer"]
    assert stage["env"]["TURNGATE_KEYLESS_READ"] == "true"
    assert "TURNGATE_POLICY_MODULE" not in stage["env"] and "TURNGATE_AUTH" not in stage["env"]
    # The default target stays the deployment image (the last stage).
    assert dict(_stages()[-1])["CMD"] == '["serve", "--host", "0.0.0.0", "--port", "8010"]'


@contextlib.contextmanager
def entry_command(tmp_path: Path, **extra_env: str) -> Iterator[str]:
    """The stage's entry command as a process; yields the API's base URL."""
    stage = allinone_stage()
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(SRC),  # this checkout's turngate, as the image installs it
        **stage["env"],
        "TURNGATE_DATA_DIR": str(tmp_path / "data"),
        "TURNGATE_HOST": "127.0.0.1",  # test traffic stays on loopback
        "TURNGATE_LOG_LEVEL": "WARNING",
        **extra_env,
    }
    env["PATH"] = os.environ.get("PATH", "")  # the image's PATH names its venv; this one is ours
    cmd = [part if part != "8010" else str(port) for part in stage["cmd"]]
    cmd += ["--temporal-port", str(free_port()), "--ui-port", str(free_port())]
    # ENTRYPOINT ["turngate"]: the same console entry point, from this interpreter's venv.
    assert stage["entrypoint"] == ["turngate"]
    log = tmp_path / "allinone.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "turngate", *cmd],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the Temporal child is ours to end too
        )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(f"{base}/healthz", timeout_s=90)
        except TimeoutError:
            raise AssertionError(log.read_text()[-4000:]) from None
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def seed_envelope(message: str, correlation_id: str, **payload: Any) -> dict[str, Any]:
    """An intent as the gateway specification's clients write it (no turngate-only field)."""
    return {
        "interface_version": 3,
        "correlation_id": correlation_id,
        "payload": {
            "stream_id": "default",
            "lane": "user_chat",
            "actor": "seed-client",
            "intent_type": "chat.message",
            "thread_id": "thread-1",
            "turn_id": f"turn-{correlation_id}",
            "payload": {"message": message},
            **payload,
        },
    }


def events_of(
    http: httpx.Client, correlation_id: str, kinds: set[str], timeout_s: float = 30
) -> dict[str, dict]:
    """Poll /snapshot (no key) until the turn has every kind in ``kinds``."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = http.get("/snapshot", params={"limit": 2000}).json()["events"]
        found = {e["kind"]: e for e in events if e["correlation_id"] == correlation_id}
        if kinds <= set(found) or time.monotonic() > deadline:
            assert kinds <= set(found), (kinds, found)
            return found
        time.sleep(0.2)


def test_the_quick_start_answers_healthz_capabilities_and_an_observer_deny(tmp_path: Path) -> None:
    with entry_command(tmp_path) as base, httpx.Client(base_url=base, timeout=20) as http:
        assert http.get("/healthz").json()["ok"] is True
        caps = http.get("/capabilities").json()
        assert caps["policy"]["observer_mode"] is True
        assert http.get("/capabilities", params={"format": "gateway.v1"}).json()["schema"] == (
            "gateway.capabilities.v1"
        )
        assert http.get("/status").json()["auth"]["keyless_read"] is True
        accepted = http.post("/ingress/intent", json=seed_envelope("hello", "c-observer"))
        assert accepted.status_code == 202, accepted.text
        recorded = events_of(http, "c-observer", {"INTENT", "DECISION"})
        decision = recorded["DECISION"]["payload"]
        assert (decision["decision"], decision["reason_codes"]) == ("DENY", ["gateway.observer_mode"])
        assert "EXECUTION" not in recorded


def test_a_seed_style_client_runs_example_1_end_to_end(tmp_path: Path) -> None:
    """The published gateway's execution-enabled run sets a policy module in the environment."""
    with (
        entry_command(tmp_path, DBL_GATEWAY_POLICY_MODULE="turngate.policies.allow_all") as base,
        httpx.Client(base_url=base, timeout=20) as http,
    ):
        first = http.post("/ingress/intent", json=seed_envelope("What is 2+2?", "c-1"))
        assert first.status_code == 202, first.text
        turn_1 = events_of(http, "c-1", {"INTENT", "DECISION", "EXECUTION"})
        # INTENT-1 and EXECUTION-1, by the two ids the client has: the correlation and turn ids.
        refs = [{"ref_type": "event", "ref_id": "c-1"}, {"ref_type": "event", "ref_id": "turn-c-1"}]
        second = http.post(
            "/ingress/intent",
            json=seed_envelope("Explain more", "c-2", parent_turn_id="turn-c-1", declared_refs=refs),
        )
        assert second.status_code == 202, second.text
        turn_2 = events_of(http, "c-2", {"INTENT", "DECISION", "EXECUTION"})
    decision = turn_2["DECISION"]["payload"]
    assert decision["decision"] == "ALLOW"
    assert [(r["event_digest"], r["admitted_for"]) for r in decision["resolved_refs"]] == [
        (turn_1["INTENT"]["digest"], "governance"),
        (turn_1["EXECUTION"]["digest"], "execution_only"),
    ]
    assert turn_2["EXECUTION"]["payload"]["output_text"]
