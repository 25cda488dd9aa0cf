"""Static checks of deploy/, the Dockerfile and .dockerignore (no Docker engine or cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty document of a (multi-document) YAML file."""
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    [document] = load_yaml_documents(DEPLOY / "docker-compose.yml")
    return document
