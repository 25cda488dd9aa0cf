"""Dockerfile and .dockerignore: base image, non-root user, entry point, health check, context."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "dangling line continuation"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in logical]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_builds_on_python_311_slim() -> None:
    args = dict(arg.split("=", 1) for name, arg in _instructions() if name == "ARG" and "=" in arg)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert [arg for name, arg in _instructions() if name == "FROM"] == [
        "${PYTHON_IMAGE} AS build",
        "build AS build-allinone",  # the all-in-one image (tests/deploy/test_allinone.py)
        "${PYTHON_IMAGE} AS allinone",
        "${PYTHON_IMAGE}",  # the default target, last
    ]


def test_installs_the_package_with_pip() -> None:
    build = _stages()[0]
    copied = [arg for name, arg in build if name == "COPY"]
    assert "pyproject.toml README.md ./" in copied
    assert "src ./src" in copied
    for source in ("pyproject.toml", "README.md", "src"):
        assert (ROOT / source).exists()
    runs = " ".join(arg for name, arg in build if name == "RUN")
    assert "pip install ." in runs


def test_runtime_stage_runs_as_a_non_root_user() -> None:
    runtime = _stages()[-1]
    users = [arg for name, arg in runtime if name == "USER"]
    assert users, "the runtime stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert int(user) >= 1000
    assert any("useradd" in arg and f"--uid {user}" in arg for name, arg in runtime if name == "RUN")
    # A fresh named volume takes the image directory's owner: setup (as the user) must write there.
    assert any(
        f"install -d -o {user} -g {user} -m 0700 /run/turngate" in arg
        for name, arg in runtime
        if name == "RUN"
    )


def test_entrypoint_and_default_command() -> None:
    runtime = dict(_stages()[-1])
    assert json.loads(runtime["ENTRYPOINT"]) == ["turngate"]
    assert json.loads(runtime["CMD"]) == ["serve", "--host", "0.0.0.0", "--port", "8010"]
    assert runtime["EXPOSE"] == "8010"


def test_healthcheck_probes_healthz() -> None:
    runtime = dict(_stages()[-1])
    healthcheck = runtime["HEALTHCHECK"]
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command[:2] == ["python", "-c"]
    assert "http://127.0.0.1:8010/healthz" in command[2]
    compile(command[2], "<healthcheck>", "exec")
    assert re.search(r"--interval=\d+s", healthcheck)
    assert re.search(r"--timeout=\d+s", healthcheck)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        body = body.rstrip("/")
        candidates = {body, body.replace("**/", "")}
        if any(fnmatch.fnmatch(path, c) or path.startswith(c + "/") for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_sends_only_the_package_sources() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for kept in ("pyproject.toml", "README.md", "src/turngate/cli.py"):
        assert not _ignored(kept, patterns), kept
    for dropped in (".venv/bin/python", ".git/config", "tests/ledger/test_append.py", "deploy/.env", ".env"):
        assert _ignored(dropped, patterns), dropped


def test_docker_build_when_asked(tmp_path: Path) -> None:
    """Opt-in (``TURNGATE_TEST_DOCKER_BUILD=1``): builds the image (minutes, downloads packages)."""
    if os.environ.get("TURNGATE_TEST_DOCKER_BUILD") != "1":
        pytest.skip("image build not requested (set TURNGATE_TEST_DOCKER_BUILD=1 with a Docker engine)")
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI: the image is not built here (static checks above ran)")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, check=False, timeout=30)
    if info.returncode != 0:
        pytest.skip("no Docker engine reachable: the image is not built here (static checks above ran)")
    result = subprocess.run(
        [docker, "build", "-q", "-t", "turngate:test", str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-2000:]
