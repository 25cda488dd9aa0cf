"""Shared helpers for the job tests: a counting (and optionally slow) embedder, documents stored
as artifacts, and job workers on fresh task queues."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np
from temporalio.client import Client
from temporalio.worker import Worker

from tests.jobs.pdf import make_pdf
from turngate.artifacts import ArtifactStore
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.embedders import EmbedderSpec, OfflineEmbedder
from turngate.jobs.cases.index import INDEX_KIND, IndexParams, make_manifest, write_index
from turngate.jobs.domain.chunking import Chunk
from turngate.jobs.domain.models import DocumentRef
from turngate.jobs.domain.queues import JobConcurrency, JobQueues
from turngate.jobs.workers import job_workers


@dataclass
class EmbedLog:
    """Every text each embedder instance embedded, and when each instance lived."""

    texts: list[str] = field(default_factory=list)
    lifetimes: list[list[float]] = field(default_factory=list)  # [created, closed]
    delay_s: float = 0.0
    hold_after: int | None = None  # after this many calls, block until cancelled (a stuck worker)
    calls: int = 0


class CountingEmbedder:
    def __init__(self, spec: EmbedderSpec, log: EmbedLog) -> None:
        self._inner = OfflineEmbedder(spec.dim or 256)
        self.embedder_id = self._inner.embedder_id
        self._log = log
        self._life = [time.monotonic(), 0.0]
        log.lifetimes.append(self._life)

    async def embed(self, texts: list[str]) -> np.ndarray:
        if self._log.hold_after is not None and self._log.calls >= self._log.hold_after:
            await asyncio.Event().wait()
        self._log.calls += 1
        if self._log.delay_s:
            await asyncio.sleep(self._log.delay_s)
        self._log.texts.extend(texts)
        return await self._inner.embed(texts)

    async def aclose(self) -> None:
        self._life[1] = time.monotonic()


def counting_factory(log: EmbedLog):
    return lambda spec: CountingEmbedder(spec, log)


@contextlib.asynccontextmanager
async def running_jobs(
    client: Client,
    store: ArtifactStore,
    *,
    log: EmbedLog | None = None,
    queues: JobQueues | None = None,
    concurrency: JobConcurrency | None = None,
) -> AsyncIterator[tuple[JobQueues, list[Worker]]]:
    queues = queues or JobQueues(prefix=f"jobs-{uuid.uuid4().hex[:8]}")
    workers = job_workers(
        client,
        artifacts=store,
        concurrency=concurrency,
        queues=queues,
        embedder_factory=counting_factory(log or EmbedLog()),
        heartbeat_throttle=timedelta(milliseconds=100),
        progress_interval_s=0.1,
    )
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield queues, workers
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)


UPLOAD_TYPE = "application/octet-stream"
SAMPLE_DOCS: dict[str, bytes] = {
    "notes.txt": b"The lighthouse keeper logs every passing ship in a leather journal.\n\n" * 3,
    "guide.md": b"# Bread\n\nSourdough needs a *starter*, flour, water and salt.\n\n- knead\n- proof\n",
    "page.html": b"<html><body><h1>Volcanoes</h1><p>Basalt lava flows are fluid.</p>"
    b"<script>ignored()</script></body></html>",
    "paper.pdf": make_pdf([["Quantum chromodynamics describes quarks and gluons."]]),
}


def store_docs(store: ArtifactStore, docs: dict[str, bytes]) -> list[DocumentRef]:
    return [
        DocumentRef(
            name=name, artifact=store.put(data, kind="case-upload", media_type="application/octet-stream")
        )
        for name, data in docs.items()
    ]


def many_docs(n: int, words: int = 60) -> dict[str, bytes]:
    """``n`` distinct plain-text documents."""
    return {f"doc-{i:03d}.txt": " ".join(f"token{i}x{j}" for j in range(words)).encode() for i in range(n)}


#: Three short documents the small offline indexes of the tests (and bench/) are built over.
TEXTS = ["The lighthouse keeper logs ships.", "Sourdough needs a starter.", "Basalt lava is fluid."]


def stored_index(store: ArtifactStore, embedder_id: str | None = None) -> tuple[ArtifactPointer, str]:
    """An index of :data:`TEXTS` (the offline embedder's vectors) stored in ``store``, its
    manifest naming ``embedder_id`` (default: the offline embedder's): (pointer, index_version)."""
    chunks = [
        Chunk(document="sha256:" + "1" * 64, ordinal=i, start=0, end=len(t), text=t)
        for i, t in enumerate(TEXTS)
    ]
    offline = OfflineEmbedder()
    matrix = offline.embed_sync(TEXTS)
    ids = [c.chunk_id for c in chunks]
    manifest, order = make_manifest(ids, matrix, embedder_id or offline.embedder_id, IndexParams())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "i.sqlite3"
        write_index(path, manifest, [TEXTS[i] for i in order], matrix[order])
        pointer = store.put(path.read_bytes(), kind=INDEX_KIND)
    return pointer, manifest.index_version
