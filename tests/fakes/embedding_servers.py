"""Fake embedding servers: real HTTP on 127.0.0.1, the vendors' real wire formats.

- :class:`FakeOpenAIEmbeddingServer`: ``POST .../embeddings`` (any prefix, so base URLs can be
  checked) answering ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
  "model", "usage"}``, honouring ``dimensions``; with ``shuffle = True`` the ``data`` items come
  back out of order (clients must sort by ``index``);
- :class:`FakeOllamaEmbeddingServer`: ``POST /api/embed`` answering ``{"model", "embeddings"}``.

Vectors are deterministic functions of the input text (sha256-seeded), so tests can compare them.
Both reuse the request recording and misbehaviour of :mod:`tests.fakes.llm_servers`
(``fail_next(status=429, retry_after="1")``, ``delay_s``, ``requests``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.llm_servers import FakeLLMServer, RecordedRequest, _Handler, _StreamError

DEFAULT_DIM = 8


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic, not normalised vector for ``text``."""
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        block = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in block)
        counter += 1
    return out[:dim]


def _inputs(body: dict[str, Any]) -> list[str]:
    value = body.get("input")
    return [value] if isinstance(value, str) else list(value or [])


class FakeOpenAIEmbeddingServer(FakeLLMServer):
    vendor = "openai"

    def __init__(self) -> None:
        super().__init__("")
        self.shuffle = False

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def _route_ok(self, method: str, path: str) -> bool:
        return method == "POST" and path.endswith("/embeddings")

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {429: "rate_limit_exceeded"}.get(status, "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        body = request.json
        dim = int(body.get("dimensions") or DEFAULT_DIM)
        texts = _inputs(body)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(texts)
        ]
        if self.shuffle:
            data.reverse()
        tokens = sum(len(t.split()) for t in texts)
        self._send_json(
            handler,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", ""),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


class FakeOllamaEmbeddingServer(FakeLLMServer):
    vendor = "ollama"

    def __init__(self) -> None:
        super().__init__("")

    @property
    def host(self) -> str:
        return self.origin

    def _route_ok(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/api/embed"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        body = request.json
        texts = _inputs(body)
        self._send_json(
            handler,
            {
                "model": body.get("model", ""),
                "embeddings": [fake_vector(t, DEFAULT_DIM) for t in texts],
                "total_duration": 1000,
                "load_duration": 10,
                "prompt_eval_count": sum(len(t.split()) for t in texts),
            },
        )


@pytest.fixture
def openai_embedding_server() -> Iterator[FakeOpenAIEmbeddingServer]:
    with FakeOpenAIEmbeddingServer() as server:
        yield server  # type: ignore[misc]


@pytest.fixture
def ollama_embedding_server() -> Iterator[FakeOllamaEmbeddingServer]:
    with FakeOllamaEmbeddingServer() as server:
        yield server  # type: ignore[misc]
