"""Embedders: the offline one (deterministic, normalised, not semantic) and OpenAI/Ollama through
their SDKs against fake servers on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.embedding_servers import (
    FakeOllamaEmbeddingServer,
    FakeOpenAIEmbeddingServer,
    fake_vector,
)
from tests.fakes.llm_servers import refused_url
from turngate.jobs.cases.embedders import (
    EmbedderSpec,
    OfflineEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    build_embedder,
    l2_normalize,
)
from turngate.providers.base import ProviderError


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=5))
def test_offline_is_deterministic_and_normalised(texts: list[str]) -> None:
    a = OfflineEmbedder(64).embed_sync(texts)
    b = OfflineEmbedder(64).embed_sync(list(texts))
    assert a.dtype == np.float32 and a.shape == (len(texts), 64)
    assert a.tobytes() == b.tobytes()
    norms = np.linalg.norm(a, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))


def test_offline_known_vector_is_stable() -> None:
    # Pinned values: if this changes, every offline embedding and index_version changes with it.
    vec = OfflineEmbedder(16).embed_sync(["hello world"])[0]
    assert [round(float(x), 4) for x in vec] == [
        -0.1715, -0.686, 0.1715, 0.0, 0.0, -0.343, 0.1715, 0.0,
        -0.1715, 0.1715, 0.0, 0.343, 0.1715, 0.0, -0.343, 0.0,
    ]  # fmt: skip


def test_offline_shares_spelling_not_meaning() -> None:
    vectors = OfflineEmbedder().embed_sync(
        ["the quick brown fox", "the quick brown foxes", "a fast auburn vixen"]
    )
    sims = vectors @ vectors.T
    assert sims[0, 1] > 0.8 and sims[0, 2] < 0.3
    assert OfflineEmbedder().embedder_id == "offline:hash-ngrams/1/dim=256"


async def test_openai_embeddings_through_the_sdk(openai_embedding_server: FakeOpenAIEmbeddingServer) -> None:
    openai_embedding_server.shuffle = True
    spec = EmbedderSpec(
        kind="openai", model="text-embedding-3-small", dim=8, base_url=openai_embedding_server.base_url
    )
    embedder = build_embedder(spec)
    assert isinstance(embedder, OpenAIEmbedder)
    try:
        out = await embedder.embed(["alpha", "beta"])
    finally:
        await embedder.aclose()
    expected = l2_normalize(np.asarray([fake_vector("alpha", 8), fake_vector("beta", 8)]))
    assert np.allclose(out, expected)  # in input order although the server answered reversed
    request = openai_embedding_server.last_request
    assert request.path == "/v1/embeddings"
    assert request.json["model"] == "text-embedding-3-small" and request.json["dimensions"] == 8
    assert embedder.embedder_id == "openai:text-embedding-3-small/dim=8"


async def test_openai_without_a_dim_sends_no_dimensions(
    openai_embedding_server: FakeOpenAIEmbeddingServer,
) -> None:
    spec = EmbedderSpec(
        kind="openai", model="text-embedding-3-small", dim=None, base_url=openai_embedding_server.base_url
    )
    embedder = build_embedder(spec)
    try:
        await embedder.embed(["alpha"])
    finally:
        await embedder.aclose()
    assert "dimensions" not in openai_embedding_server.last_request.json  # the model's own size


async def test_openai_rate_limit_is_retryable_and_not_retried_by_the_sdk(
    openai_embedding_server: FakeOpenAIEmbeddingServer,
) -> None:
    openai_embedding_server.fail_next(429, retry_after="2")
    embedder = OpenAIEmbedder(
        EmbedderSpec(kind="openai", model="m", dim=8, base_url=openai_embedding_server.base_url)
    )
    with pytest.raises(ProviderError) as err:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert err.value.type == "provider.rate_limited" and err.value.retryable
    assert err.value.retry_after_s == 2
    assert len(openai_embedding_server.requests) == 1  # max_retries=0: Temporal owns retries


async def test_openai_bad_request_is_not_retryable(
    openai_embedding_server: FakeOpenAIEmbeddingServer,
) -> None:
    openai_embedding_server.fail_next(400, message="bad input")
    embedder = OpenAIEmbedder(
        EmbedderSpec(kind="openai", model="m", dim=8, base_url=openai_embedding_server.base_url)
    )
    with pytest.raises(ProviderError) as err:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert err.value.type == "provider.bad_request" and not err.value.retryable


async def test_ollama_embeddings_through_the_sdk(ollama_embedding_server: FakeOllamaEmbeddingServer) -> None:
    spec = EmbedderSpec(
        kind="ollama", model="nomic-embed-text", dim=None, base_url=ollama_embedding_server.host
    )
    embedder = build_embedder(spec)
    assert isinstance(embedder, OllamaEmbedder)
    try:
        out = await embedder.embed(["alpha", "beta", "gamma"])
    finally:
        await embedder.aclose()
    assert out.shape == (3, 8)
    assert np.allclose(out[2], l2_normalize(np.asarray([fake_vector("gamma", 8)]))[0])
    request = ollama_embedding_server.last_request
    assert request.path == "/api/embed" and request.json["input"] == ["alpha", "beta", "gamma"]
    assert embedder.embedder_id == "ollama:nomic-embed-text"


async def test_ollama_server_error_is_retryable(ollama_embedding_server: FakeOllamaEmbeddingServer) -> None:
    ollama_embedding_server.fail_next(503)
    embedder = OllamaEmbedder(
        EmbedderSpec(kind="ollama", model="m", dim=None, base_url=ollama_embedding_server.host)
    )
    with pytest.raises(ProviderError) as err:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert err.value.retryable and err.value.type == "provider.overloaded"


async def test_unreachable_ollama_is_a_connection_error() -> None:
    embedder = OllamaEmbedder(EmbedderSpec(kind="ollama", model="m", dim=None, base_url=refused_url()))
    with pytest.raises(ProviderError) as err:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert err.value.type == "provider.connection" and err.value.retryable
