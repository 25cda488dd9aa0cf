"""A job worker process for bench/jobs_long.py (the process the benchmark SIGKILLs).

    python -m bench.jobs_worker --address 127.0.0.1:7233 --store DIR --prefix P [--count-writes FILE]

Runs the case job workers (the offline embedder) against ``--address`` with the claim-check
converter on the local artifact store ``DIR``, task queues ``P-ingest|embed|index``. With
``--count-writes``, every artifact write is appended to FILE as ``kind retention`` (what the
benchmark counts as artifacts written by checkpoints).
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from turngate.artifacts import LocalArtifactStore
from turngate.artifacts.temporal_codec import turngate_data_converter
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.domain.queues import JobQueues
from turngate.jobs.workers import job_workers


class CountingStore(LocalArtifactStore):
    def __init__(self, root: Path, log: Path | None) -> None:
        super().__init__(root)
        self._log = log.open("a", buffering=1) if log else None

    def put(self, data: bytes, **kw: Any) -> ArtifactPointer:
        if self._log is not None:
            self._log.write(f"{kw.get('kind')} {kw.get('retention', 'standard')}\n")
        return super().put(data, **kw)


async def main(address: str, store_dir: Path, prefix: str, count_writes: Path | None) -> None:
    store = CountingStore(store_dir, count_writes)
    client = await Client.connect(address, data_converter=turngate_data_converter(store))
    workers = job_workers(
        client,
        artifacts=store,
        queues=JobQueues(prefix=prefix),
        work_dir=store_dir.parent,
        heartbeat_throttle=timedelta(seconds=1),
    )
    await asyncio.gather(*(w.run() for w in workers))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count-writes", type=Path)
    args = parser.parse_args()
    asyncio.run(main(args.address, args.store, args.prefix, args.count_writes))
