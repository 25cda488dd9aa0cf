"""Embedders behind one protocol: offline (the embedded default), OpenAI and Ollama.

The offline embedder is deterministic and needs no network, but it is **not semantic**: it hashes
character n-grams into a fixed number of buckets (the "hashing trick"), so texts that share
spelling score high and synonyms do not. It exists so the whole job pipeline runs, and is
reproducible, with no model and no key. Use OpenAI or Ollama for meaning.

Remote embedders go through the vendors' official SDKs with ``max_retries=0`` (Temporal owns
retries) and raise :class:`~turngate.providers.base.ProviderError` classified by the same table as
the chat providers (429/5xx/timeouts retryable, other 4xx not).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

from turngate.jobs.domain.embedder_spec import OFFLINE_VERSION, EmbedderSpec
from turngate.providers.base import ProviderError
from turngate.providers.error_classification import classify_exception

_NGRAMS = (3, 4, 5)
_PRIME = np.uint64(1_000_003)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@runtime_checkable
class Embedder(Protocol):
    embedder_id: str

    async def embed(self, texts: list[str]) -> np.ndarray:
        """One float32 row per text, L2-normalised."""
        ...

    async def aclose(self) -> None: ...


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return cast(np.ndarray, (matrix / norms).astype(np.float32))  # numpy's stubs: Any here


def hashed_ngrams(text: str, dim: int) -> np.ndarray:
    """Signed counts of the hashed 3/4/5-character n-grams of ``text`` (lowercased, spaces
    collapsed, padded) in ``dim`` buckets. uint64 arithmetic wraps the same on every platform."""
    normal = " " + " ".join(text.lower().split()) + " "
    codes = np.frombuffer(normal.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    out = np.zeros(dim, dtype=np.float64)
    for n in _NGRAMS:
        count = len(codes) - n + 1
        if count <= 0:
            continue
        h = np.full(count, n, dtype=np.uint64)
        for k in range(n):
            h = h * _PRIME + codes[k : k + count]
        h ^= h >> np.uint64(31)
        h *= _MIX
        h ^= h >> np.uint64(29)
        buckets = (h % np.uint64(dim)).astype(np.int64)
        signs = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0)
        out += np.bincount(buckets, weights=signs, minlength=dim)
    return out


class OfflineEmbedder:
    """Hashed character n-grams, L2-normalised: deterministic, offline, not semantic."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.embedder_id = EmbedderSpec(dim=dim).embedder_id

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(np.stack([hashed_ngrams(t, self.dim) for t in texts]))

    async def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_sync(texts)  # ~0.1 ms per chunk: cheaper than a thread hop

    async def aclose(self) -> None:
        return None


class OpenAIEmbedder:
    """``POST {base_url}/embeddings`` through the ``openai`` SDK."""

    def __init__(self, spec: EmbedderSpec, *, api_key: str | None = None) -> None:
        import openai

        self.spec = spec
        self.embedder_id = spec.embedder_id
        key = api_key or os.environ.get("OPENAI_API_KEY") or "sk-none"
        self._secrets = (key,)
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=spec.base_url or None, max_retries=0, timeout=spec.timeout_s
        )

    async def embed(self, texts: list[str]) -> np.ndarray:
        from openai import omit

        try:
            resp = await self._client.embeddings.create(
                model=self.spec.model,
                input=texts,
                encoding_format="float",
                dimensions=self.spec.dim or omit,  # no dim: the model's own size
            )
        except Exception as exc:
            raise _classified(exc, "openai", self._secrets) from None
        rows = sorted(resp.data, key=lambda item: item.index)
        return _checked(self.embedder_id, [row.embedding for row in rows], len(texts), self.spec.dim)

    async def aclose(self) -> None:
        await self._client.close()


class OllamaEmbedder:
    """``POST {host}/api/embed`` through the ``ollama`` SDK."""

    def __init__(self, spec: EmbedderSpec) -> None:
        import ollama

        self.spec = spec
        self.embedder_id = spec.embedder_id
        self._client = ollama.AsyncClient(host=spec.base_url or None, timeout=spec.timeout_s)

    async def embed(self, texts: list[str]) -> np.ndarray:
        try:
            resp = await self._client.embed(model=self.spec.model, input=texts)
        except Exception as exc:
            raise _classified(exc, "ollama", ()) from None
        return _checked(self.embedder_id, list(resp.embeddings), len(texts), None)

    async def aclose(self) -> None:
        await self._client._client.aclose()


def build_embedder(spec: EmbedderSpec) -> Embedder:
    if spec.kind == "offline":
        if spec.model != OFFLINE_VERSION:
            raise ValueError(f"offline embedder model must be {OFFLINE_VERSION!r}")
        return OfflineEmbedder(spec.dim or 256)
    if spec.kind == "openai":
        return OpenAIEmbedder(spec)
    return OllamaEmbedder(spec)


def _classified(exc: Exception, vendor: str, secrets: tuple[str, ...]) -> Exception:
    return classify_exception(exc, vendor=vendor, secrets=secrets) or exc


def _checked(embedder_id: str, rows: Sequence[Sequence[float]], expected: int, dim: int | None) -> np.ndarray:
    if len(rows) != expected:
        raise ProviderError(
            "provider.invalid_response",
            f"{embedder_id}: {len(rows)} embeddings for {expected} inputs",
            retryable=False,
        )
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2 or (dim and matrix.shape[1] != dim) or not np.isfinite(matrix).all():
        raise ProviderError(
            "provider.invalid_response", f"{embedder_id}: malformed embeddings", retryable=False
        )
    return l2_normalize(matrix)
