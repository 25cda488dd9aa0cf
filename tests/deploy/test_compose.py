"""deploy/docker-compose.yml: the services, their wiring, health checks and secrets."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import DEPLOY, ROOT

EXPECTED_SERVICES = {
    "postgresql",
    "temporal-schema",
    "temporal",
    "temporal-namespace",
    "temporal-ui",
    "minio",
    "minio-bucket",
    "redis",
    "setup",
    "worker",
    "api",
    "gc",
}
TURNGATE_ENV = {
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TURNGATE_LEDGER_URL",
    "TURNGATE_ARTIFACTS",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "TURNGATE_TOKEN_BUS_URL",
    "TURNGATE_POLICY_MODULE",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TURNGATE_AUTH",
    "TURNGATE_ENCRYPTION_KEYS_FILE",
    "TURNGATE_TEMPORAL_UI_URL",
}
SECRETS_VOLUME = "turngate-secrets"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|API_KEY|ACCESS_KEY|PWD")
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?P<op>:?[-?])?(?P<arg>[^}]*)\}")


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        return dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


def test_every_service_is_there(compose: dict[str, Any]) -> None:
    assert set(_services(compose)) == EXPECTED_SERVICES


def test_official_images(compose: dict[str, Any]) -> None:
    images = {name: service.get("image", "") for name, service in _services(compose).items()}
    assert images["postgresql"].startswith("postgres:${POSTGRES_VERSION:-16.")
    assert images["temporal"].startswith("temporalio/server:")
    assert images["temporal-schema"].startswith("temporalio/admin-tools:")
    assert images["temporal-namespace"].startswith("temporalio/admin-tools:")
    assert images["temporal-ui"].startswith("temporalio/ui:")
    assert images["minio"].startswith("minio/minio:")
    assert images["minio-bucket"].startswith("minio/mc:")


def test_temporal_persists_in_postgresql(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name in ("temporal", "temporal-schema"):
        env = _env(services[name])
        assert env["DB"] == "postgres12"
        assert env["POSTGRES_SEEDS"] == "postgresql"
    dynamic = _env(services["temporal"])["DYNAMIC_CONFIG_FILE_PATH"]
    assert (DEPLOY / "temporal" / "dynamicconfig" / Path(dynamic).name).is_file()
    assert _env(services["temporal-ui"])["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_worker_and_api_are_configured_from_the_environment(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name in ("worker", "api"):
        env = _env(services[name])
        assert env.keys() >= TURNGATE_ENV, TURNGATE_ENV - env.keys()
        assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
        # the least-privileged role; only setup connects as the owner
        assert env["TURNGATE_LEDGER_URL"].startswith("postgresql+psycopg://turngate_app:${TURNGATE_APP_DB_")
        assert env["TURNGATE_LEDGER_URL"].endswith("@postgresql:5432/turngate")
        assert env["TURNGATE_ARTIFACTS"].startswith("s3://")
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
        assert env["TURNGATE_TOKEN_BUS_URL"].startswith("redis://redis:")
        assert env["TURNGATE_AUTH"] == "keys"
        assert env["TURNGATE_ENCRYPTION_KEYS_FILE"].startswith("/run/turngate/")
        assert f"{SECRETS_VOLUME}:/run/turngate:ro" in services[name]["volumes"]
    assert services["worker"]["command"] == ["worker"]
    assert services["api"]["command"] == ["serve", "--host", "0.0.0.0", "--port", "8010"]
    assert services["worker"]["image"] == services["api"]["image"]
    assert services["api"]["build"]["context"] == ".."
    assert (DEPLOY / services["api"]["build"]["context"] / services["api"]["build"]["dockerfile"]).is_file()


def test_the_worker_scales(compose: dict[str, Any]) -> None:
    worker = _services(compose)["worker"]
    # Replicas cannot share a container name or a host port.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert str(worker["deploy"]["replicas"]).startswith("${TURNGATE_WORKER_REPLICAS:-")
    assert worker["healthcheck"] == {"disable": True}  # the image's check probes the API


def test_health_checks_and_start_order(compose: dict[str, Any]) -> None:
    services = _services(compose)
    api_check = " ".join(services["api"]["healthcheck"]["test"])
    assert "/healthz" in api_check and ":8010" in api_check
    compile(services["api"]["healthcheck"]["test"][-1], "<healthcheck>", "exec")
    for name in ("postgresql", "temporal", "minio", "redis"):
        assert services[name]["healthcheck"]["test"], name
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)
            else:
                assert condition == "service_completed_successfully", (name, dependency)
                assert str(services[dependency]["restart"]).startswith("on-failure"), dependency
    expected = {
        "temporal": {"temporal-schema": "service_completed_successfully"},
        "temporal-schema": {"postgresql": "service_healthy"},
        "temporal-namespace": {"temporal": "service_healthy"},
        "minio-bucket": {"minio": "service_healthy"},
    }
    for name, dependencies in expected.items():
        for dependency, condition in dependencies.items():
            assert services[name]["depends_on"][dependency]["condition"] == condition
    for name in ("worker", "api"):
        depends = services[name]["depends_on"]
        assert depends["postgresql"]["condition"] == "service_healthy"
        assert depends["temporal-namespace"]["condition"] == "service_completed_successfully"
        assert depends["minio-bucket"]["condition"] == "service_completed_successfully"


def test_no_secret_is_written_into_the_file(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        for key, value in _env(service).items():
            if SECRET_NAME.search(key) and value:
                assert VARIABLE.fullmatch(value), f"{name}.{key} must come from the environment: {value!r}"
        for key, value in _env(service).items():
            if "://" in value and "@" in value:  # a URL with credentials
                credentials = value.split("://", 1)[1].split("@", 1)[0]
                assert "${" in credentials, f"{name}.{key} embeds a literal password"


def test_required_variables_are_all_in_env_example(compose: dict[str, Any]) -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    required = {m["name"] for m in VARIABLE.finditer(text) if m["op"] in (":?", "?")}
    assert required >= {
        "POSTGRES_PASSWORD",
        "TEMPORAL_DB_PASSWORD",
        "TURNGATE_DB_PASSWORD",
        "MINIO_ROOT_PASSWORD",
    }
    example = _env_file(DEPLOY / ".env.example")
    assert required <= example.keys(), required - example.keys()
    for name in required:
        if SECRET_NAME.search(name):
            assert "change-me" in example[name], f"{name} in .env.example must be a placeholder"
    # Every variable the file reads is listed in .env.example (set, or commented out).
    listed = example.keys() | _env_file(DEPLOY / ".env.example", commented=True).keys()
    used = {m["name"] for m in VARIABLE.finditer(text)}
    assert used <= listed, used - listed


def _env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """KEY=value lines (``commented``: the ``# KEY=value`` ones instead)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if commented:
            match = re.match(r"#\s*([A-Z][A-Z0-9_]*)=(.*)", line)
            if match:
                values[match[1]] = match[2]
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def test_mounted_files_exist_and_scripts_are_executable(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), (name, source)
    for script in [*(DEPLOY / "temporal").glob("*.sh"), *(DEPLOY / "postgres" / "initdb.d").glob("*.sh")]:
        assert os.access(script, os.X_OK), f"{script} must be executable"
        if shutil.which("sh"):
            subprocess.run(["sh", "-n", str(script)], check=True)


def _docker_compose_available() -> str | None:
    """None if `docker compose` can render a file here, else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        first_line = ((probe.stderr or probe.stdout).strip().splitlines() or ["no output"])[0]
        return f"`docker compose` is not available: {first_line[:200]}"
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    missing = _docker_compose_available()
    if missing:
        pytest.skip(f"docker compose config not run ({missing}); the YAML checks above still ran")
    result = subprocess.run(
        [
            *("docker", "compose", "--env-file", str(DEPLOY / ".env.example")),
            *("-f", str(DEPLOY / "docker-compose.yml"), "config", "-q"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_temporal_frontend_and_ui_listen_on_this_host_only(compose: dict[str, Any]) -> None:
    """They have no authentication: published, anyone on the network could read every history
    or start a TurnWorkflow past the API's keys."""
    services = _services(compose)
    published = {name: service.get("ports", []) for name, service in services.items() if service.get("ports")}
    for name, ports in published.items():
        for port in ports:
            if name == "api":
                continue  # authenticated (TURNGATE_AUTH=keys)
            assert str(port).startswith("127.0.0.1:"), (name, port)
    assert set(published) == {"temporal", "temporal-ui", "minio", "api"}


def test_every_image_is_pinned_to_a_version(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        image = service["image"]
        if image.startswith("${TURNGATE_IMAGE"):
            continue
        default = VARIABLE.search(image)
        tag = default.group("arg") if default else image.rsplit(":", 1)[-1]
        assert tag and tag != "latest" and re.search(r"\d", tag), (name, image)


def test_setup_migrates_as_owner_and_bootstraps_the_keys(compose: dict[str, Any]) -> None:
    services = _services(compose)
    setup = services["setup"]
    assert setup["command"][0] == "setup"
    flags = dict(zip(setup["command"][1::2], setup["command"][2::2], strict=True))
    assert flags["--app-role"] == "turngate_app"
    app_env = _env(services["api"])
    assert flags["--encryption-keys-file"] == app_env["TURNGATE_ENCRYPTION_KEYS_FILE"]
    assert flags["--admin-key-file"].startswith("/run/turngate/")
    assert _env(setup)["TURNGATE_LEDGER_URL"].startswith(
        "postgresql+psycopg://turngate:${TURNGATE_DB_PASSWORD"
    )
    assert f"{SECRETS_VOLUME}:/run/turngate" in setup["volumes"]
    assert str(setup["restart"]).startswith("on-failure")
    assert SECRETS_VOLUME in compose["volumes"]
    for name in ("worker", "api", "gc"):
        assert services[name]["depends_on"]["setup"]["condition"] == "service_completed_successfully"


def test_gc_runs_on_a_schedule(compose: dict[str, Any]) -> None:
    gc = _services(compose)["gc"]
    assert gc["entrypoint"] == ["/bin/sh", "-c"]
    [loop] = gc["command"]
    assert "turngate gc --older-than" in loop and "sleep 86400" in loop
    assert _env(gc)["TURNGATE_GC_OLDER_THAN"].startswith("${TURNGATE_GC_OLDER_THAN:-")


def test_the_temporal_ui_decodes_through_the_codec_endpoint(compose: dict[str, Any]) -> None:
    env = _env(_services(compose)["temporal-ui"])
    assert env["TEMPORAL_CODEC_ENDPOINT"].endswith("/codec")
