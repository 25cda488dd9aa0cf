"""The deployed topology, as processes (no container runtime runs where the tests run): a Temporal
server, a PostgreSQL ledger, an S3 server (moto), `turngate setup`, two workers and two APIs,
configured by the environment the compose file gives its turngate services (only the host
addresses, credentials and the demo policy differ), with keys auth and encrypted histories.
A first `turngate chat` with the bootstrapped admin key succeeds, as docs/DEPLOY.md says."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests.deploy.conftest import DEPLOY, load_yaml_documents
from tests.ledger.postgres import PostgresServer, admin_connection
from tests.processes import wait_http
from turngate.devserver import DevServer, free_port

REDIS_URL = os.environ.get("TURNGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?::?(?P<op>[-?])(?P<arg>[^}]*))?\}")
MESSAGE = f"quarterly forecast {uuid.uuid4().hex[:8]}"


def compose_environment() -> dict[str, str]:
    """The turngate services' environment from deploy/docker-compose.yml, ``${VAR:-default}``
    resolved to its default (``${VAR:?...}``: required, left as None for the test to supply)."""
    [compose] = load_yaml_documents(DEPLOY / "docker-compose.yml")
    resolved: dict[str, Any] = {}
    for name, value in compose["x-turngate-environment"].items():
        text = str(value)
        if any(m.group("op") == "?" for m in VARIABLE.finditer(text)):
            resolved[name] = None
        else:
            resolved[name] = VARIABLE.sub(lambda m: m.group("arg") or "", text)
    return resolved


def _redis_available() -> str | None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping()
    except Exception as exc:
        return f"no Redis at {REDIS_URL} ({exc}); set TURNGATE_TEST_REDIS_URL"
    return None


@pytest.fixture
def app_database(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    """(owner URL, application-role URL) of a fresh database; the role is dropped afterwards."""
    owner_url = postgres_server.create_database()
    role = f"tgapp_{uuid.uuid4().hex[:12]}"
    with admin_connection(postgres_server.admin_url) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    app_url = make_url(owner_url).set(username=role, password=None).render_as_string(hide_password=False)
    try:
        yield owner_url, app_url
    finally:
        postgres_server.drop_database(owner_url)
        with admin_connection(postgres_server.admin_url) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path / "moto.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _base_env() -> dict[str, str]:
    """The test runner's environment without any turngate, Temporal or OTel setting of its own."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("TURNGATE_", "TEMPORAL_", "OTEL_", "AWS_"))
    }


def _turngate(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [sys.executable, "-m", "turngate", *args], env=env, stdout=out, stderr=subprocess.STDOUT
    )


async def test_the_deployed_topology_as_processes(
    tmp_path: Path, temporal_server: DevServer, app_database: tuple[str, str], s3_endpoint: str
) -> None:
    if problem := _redis_available():
        pytest.skip(problem)
    owner_url, app_url = app_database
    secrets = tmp_path / "run-turngate"
    manifest = compose_environment()
    suffix = uuid.uuid4().hex[:8]
    # What differs from a compose host: addresses, credentials, file paths, the demo policy.
    local = {
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TURNGATE_LEDGER_URL": app_url,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "TURNGATE_TOKEN_BUS_URL": REDIS_URL,
        "TURNGATE_ENCRYPTION_KEYS_FILE": str(secrets / "encryption-keys"),
        "TURNGATE_POLICY_MODULE": "turngate.policies.allow_all",  # DEPLOY.md's demo .env
    }
    assert local.keys() <= manifest.keys(), local.keys() - manifest.keys()
    unset = {name for name, value in (manifest | local).items() if value is None}
    assert not unset, unset  # every required (${VAR:?}) value is supplied above
    env = _base_env() | {k: v for k, v in (manifest | local).items() if v is not None}
    assert env["TURNGATE_AUTH"] == "keys" and env["TURNGATE_ENCRYPTION_KEYS_FILE"]
    # Per test, so other tests' workers on the shared Temporal server never take these turns.
    env |= {
        "TURNGATE_DATA_DIR": str(tmp_path / "data"),
        "TURNGATE_TURNS_TASK_QUEUE": f"turns-{suffix}",
        "TURNGATE_LLM_TASK_QUEUE": f"llm-{suffix}",
        "TURNGATE_WORKFLOW_ID_PREFIX": f"t{suffix}",
        "TURNGATE_JOB_QUEUE_PREFIX": f"jobs-{suffix}",
    }
    import boto3

    bucket = manifest["TURNGATE_ARTIFACTS"].removeprefix("s3://").split("/", 1)[0]
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    s3.create_bucket(Bucket=bucket)  # the compose file's minio-bucket one-shot

    admin_key_file = secrets / "admin-key"
    setup_env = env | {"TURNGATE_LEDGER_URL": owner_url}
    role = make_url(app_url).username
    setup = [
        sys.executable, "-m", "turngate", "setup", "--app-role", str(role),
        "--encryption-keys-file", env["TURNGATE_ENCRYPTION_KEYS_FILE"],
        "--admin-key-file", str(admin_key_file),
    ]  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run, setup, env=setup_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    again = await asyncio.to_thread(
        subprocess.run, setup, env=setup_env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and "an admin key exists; none created" in again.stdout  # idempotent
    admin_key = admin_key_file.read_text().strip()
    assert oct(admin_key_file.stat().st_mode & 0o777) == "0o600"

    ports = [free_port(), free_port()]
    worker_port = free_port()  # the k8s manifests set TURNGATE_WORKER_METRICS_BIND for probes
    worker_env = env | {"TURNGATE_WORKER_METRICS_BIND": f"127.0.0.1:{worker_port}"}
    procs = [
        _turngate(["worker"], worker_env, tmp_path / "worker-a.log"),
        _turngate(["worker"], env, tmp_path / "worker-b.log"),
        *(
            _turngate(["serve", "--host", "127.0.0.1", "--port", str(p)], env, tmp_path / f"api-{p}.log")
            for p in ports
        ),
    ]
    try:
        for port in ports:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz", 90)
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{worker_port}/healthz", 90)
        async with httpx.AsyncClient(timeout=10) as probe:
            for _ in range(100):  # ready once its first check has run
                worker_health = await probe.get(f"http://127.0.0.1:{worker_port}/healthz")
                if worker_health.status_code == 200:
                    break
                await asyncio.sleep(0.2)
            assert worker_health.json() == {"ok": True}
        # The first chat of DEPLOY.md, with the bootstrapped key.
        chat = [sys.executable, "-m", "turngate", "chat", MESSAGE, "--url", f"http://127.0.0.1:{ports[0]}"]
        said = await asyncio.to_thread(
            subprocess.run, chat, env=env | {"TURNGATE_API_KEY": admin_key}, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert said.returncode == 0, said.stdout + said.stderr
        assert f"echo: {MESSAGE}" in said.stdout

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[1]}", timeout=60) as http:
            admin = {"Authorization": f"Bearer {admin_key}"}
            assert (await http.get("/healthz")).json()["ok"] is True
            assert (await http.get("/status")).status_code == 401  # keys auth: nothing without a key
            status = (await http.get("/status", headers=admin)).json()
            assert status["temporal"]["reachable"] and status["temporal"]["missing_search_attributes"] == []
            body = {
                "interface_version": 3,
                "correlation_id": f"c-{suffix}",
                "payload": {"intent_type": "chat.message", "payload": {"message": MESSAGE}},
            }
            second = await http.post(
                "/ingress/intent", params={"wait": "execution"}, json=body, headers=admin
            )
            assert second.status_code == 202, second.text
            assert second.json()["execution"]["payload"]["output_text"] == f"echo: {MESSAGE}"
            workflow_id = second.json()["workflow_id"]

        # Temporal holds ciphertext; the artifacts went to S3; the ledger verifies.
        plain = await Client.connect(temporal_server.address)
        history = await plain.get_workflow_handle(workflow_id).fetch_history()
        raw = History(events=history.events).SerializeToString()
        assert MESSAGE.encode() not in raw and b"binary/encrypted" in raw
        assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) > 0
        verify = [sys.executable, "-m", "turngate", "verify"]
        checked = await asyncio.to_thread(
            subprocess.run, verify, env=env, capture_output=True, text=True, timeout=120
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
