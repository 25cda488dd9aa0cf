"""Long jobs at production size: ingest + embed + index with the worker SIGKILLed twice.

    .venv/bin/python bench/jobs_long.py --docs 20000                  # default batch size
    .venv/bin/python bench/jobs_long.py --docs 5000 --batch-size 1    # one text per embed call
    .venv/bin/python bench/jobs_long.py --docs 200 --kills 2          # quick

A private Temporal dev server, a job worker in its own process (bench/jobs_worker.py: the
offline embedder, a local artifact store with the claim-check codec), and this process as the
client. The worker is SIGKILLed once mid-ingest and once mid-embed and restarted at once; the
job resumes from its last heartbeat after the heartbeat timeout. Reports, per job: seconds,
steps and runs (continue-as-new), history events per run (max), and at the end: every chunk
embedded and indexed exactly once, artifacts written by checkpoints (segments and segment
groups: O(batches)), what the store holds by kind (no checkpoint scratch left), throughput in
chunks/s end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.jobs import synthetic_text  # noqa: E402


class Worker:
    """The killable job worker process."""

    def __init__(self, address: str, store: Path, prefix: str, writes: Path, log: Path) -> None:
        self._cmd = [
            sys.executable, "-m", "bench.jobs_worker", "--address", address,
            "--store", str(store), "--prefix", prefix, "--count-writes", str(writes),
        ]  # fmt: skip
        self._log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        with self._log.open("ab") as out:
            self.process = subprocess.Popen(self._cmd, cwd=ROOT, env=env, stdout=out, stderr=out)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


async def _progress(client: Any, job_id: str) -> tuple[int, int]:
    from turngate.jobs.control import get_job_status

    try:
        status = await get_job_status(client, job_id, with_result=False)
    except Exception as exc:
        print("status:", repr(exc), file=sys.stderr)
        return 0, 0
    return status.items_done, status.items_total


async def _kill_midway(client: Any, worker: Worker, job_id: str, kills: list[dict[str, Any]]) -> None:
    """SIGKILL the worker once the job is about half done, then start a new one."""
    while True:
        done, total = await _progress(client, job_id)
        if total and done >= total // 2:
            worker.kill()
            kills.append({"job": job_id, "items_done": done, "items_total": total, "at": time.time()})
            worker.start()
            return
        await asyncio.sleep(0.5)


async def _runs(client: Any, job_id: str) -> dict[str, Any]:
    """Every run of a job (continue-as-new chain): events per run and steps."""
    events: list[int] = []
    async for execution in client.list_workflows(f"WorkflowId = '{job_id}'"):
        handle = client.get_workflow_handle(job_id, run_id=execution.run_id)
        events.append(len((await handle.fetch_history()).events))
    return {"runs": len(events), "events_max": max(events), "events_total": sum(events)}


async def run(
    docs: int, doc_bytes: int, batch_size: int | None, kills: int, keep: Path | None
) -> dict[str, Any]:
    from temporalio.client import Client

    from turngate.artifacts import LocalArtifactStore
    from turngate.artifacts.temporal_codec import turngate_data_converter
    from turngate.devserver import DevServer, free_port
    from turngate.jobs.cases.embedders import EmbedderSpec
    from turngate.jobs.cases.segments import load_chunk_manifest, load_embeddings
    from turngate.jobs.control import start_job
    from turngate.jobs.domain.models import DocumentRef, EmbedInput, IndexInput, IngestInput, JobOptions
    from turngate.jobs.domain.queues import JobQueues

    rng = random.Random(7)
    tmp = tempfile.TemporaryDirectory(prefix="turngate-bench-long-")
    root = keep or Path(tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    server = DevServer(
        db_file=root / "temporal.sqlite3", port=free_port(), ui_port=None, log_file=root / "t.log"
    )
    server.start()
    worker: Worker | None = None
    try:
        await server.wait_ready()
        store_dir = root / "artifacts"
        store = LocalArtifactStore(store_dir)
        client = await Client.connect(server.address, data_converter=turngate_data_converter(store))
        t_upload = time.perf_counter()
        refs = [
            DocumentRef(
                name=f"doc-{i}.txt",
                artifact=store.put(synthetic_text(rng, doc_bytes).encode(), kind="case-upload"),
            )
            for i in range(docs)
        ]
        upload_s = time.perf_counter() - t_upload
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        queues = JobQueues(prefix=prefix)
        writes = root / "writes.log"
        worker = Worker(server.address, store_dir, prefix, writes, root / "worker.log")
        worker.start()
        options = JobOptions(wall_clock_s=7200, heartbeat_timeout_s=10)
        kill_log: list[dict[str, Any]] = []
        timings: dict[str, float] = {}
        ids: dict[str, str] = {}

        async def job(kind: str, input: Any, kill: bool) -> Any:
            job_id = f"job-{kind.split('.')[1]}-bench-{uuid.uuid4().hex[:12]}"
            ids[kind] = job_id
            t = time.perf_counter()
            handle = await start_job(client, kind, input, job_id=job_id, queues=queues)
            killer = asyncio.create_task(_kill_midway(client, worker, job_id, kill_log)) if kill else None
            result = await handle.result()
            if killer is not None:
                killer.cancel()
            timings[kind] = time.perf_counter() - t
            return result

        t0 = time.perf_counter()
        ingested = await job(
            "case.ingest", IngestInput(case_id="bench", documents=refs, options=options), kills >= 1
        )
        spec = EmbedderSpec(batch_size=batch_size) if batch_size else EmbedderSpec()
        embedded = await job(
            "case.embed",
            EmbedInput(case_id="bench", chunks=ingested.chunks, embedder=spec, options=options),
            kills >= 2,
        )
        indexed = await job(
            "case.index",
            IndexInput(
                case_id="bench", chunks=ingested.chunks, embeddings=embedded.embeddings, options=options
            ),
            False,
        )
        total_s = time.perf_counter() - t0

        # every chunk once: the embedding set covers the manifest exactly, the index has one row each
        manifest = load_chunk_manifest(store, ingested.chunks)
        _, emb_ids, matrix = load_embeddings(store, embedded.embeddings)
        index_file = store.file_path(indexed.index.path)
        with sqlite3.connect(index_file) as db:
            rows = db.execute("SELECT count(*), count(DISTINCT chunk_id) FROM chunks").fetchone()
        chunk_ids = manifest.chunk_ids
        once = emb_ids == chunk_ids and len(set(emb_ids)) == len(emb_ids) and rows == (len(chunk_ids),) * 2
        histories = {kind: await _runs(client, job_id) for kind, job_id in ids.items()}
        written = collections.Counter(line.strip() for line in writes.read_text().splitlines())
        held: dict[str, dict[str, int]] = {}
        for record in store.iter_artifacts():
            entry = held.setdefault(f"{record.retention}/{record.kind}", {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += record.pointer.size_bytes
        per = options.checkpoint_items
        batch = spec.batch_size
        embed_per = -(-max(per, batch) // batch) * batch
        return {
            "documents": docs,
            "doc_bytes": doc_bytes,
            "batch_size": batch,
            "checkpoint_items": per,
            "chunks": len(chunk_ids),
            "upload_s": round(upload_s, 1),
            **{f"{k.split('.')[1]}_s": round(v, 1) for k, v in timings.items()},
            "total_s": round(total_s, 1),
            "chunks_per_s": round(len(chunk_ids) / total_s, 1),
            "kills": kill_log,
            "every_chunk_once": once,
            "embedding_rows": int(matrix.shape[0]),
            "index_rows": rows[0],
            "histories": histories,
            "history_events_max": max(h["events_max"] for h in histories.values()),
            "checkpoint_writes": {
                "ingest_segments": written.get("case-job-segment snapshot", 0),
                "embed_segments": written.get("case-job-segment standard", 0),
                "segment_groups": written.get("case-job-checkpoint snapshot", 0),
                "ingest_batches": -(-docs // per),
                "embed_batches": -(-len(chunk_ids) // embed_per),
            },
            "offloaded_payload_writes": written.get("temporal_payload standard", 0),
            "store_at_end": held,
            "store_scratch_left": sum(
                v["files"]
                for k, v in held.items()
                if k in ("snapshot/case-job-segment", "snapshot/case-job-checkpoint")
            ),
        }
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
        tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--doc-bytes", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, help="texts per embedding call (default: the spec's, 64)")
    parser.add_argument(
        "--kills", type=int, default=2, choices=(0, 1, 2), help="worker SIGKILLs (ingest, embed)"
    )
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.docs, args.doc_bytes, args.batch_size, args.kills, args.keep))
    print(json.dumps(result, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
