from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.embedding_servers import ollama_embedding_server, openai_embedding_server
from turngate.artifacts import LocalArtifactStore


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


__all__ = ["ollama_embedding_server", "openai_embedding_server"]
