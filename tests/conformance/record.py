"""Records the conformance corpus against the published DBL gateway (``dbl-gateway==1.0.1``).

Starts it as ``bench/dbl.py`` does (``dbl-gateway serve`` in its own venv, installed from PyPI on
first use; the benchmark's boundary that admits every request class and declared refs; context
``max_refs`` 50, ``ALLOW_EMPTY``; dev auth; the fake Ollama provider of ``bench/dbl_provider.py``)
with context resolution on (``GATEWAY_ENABLE_CONTEXT_RESOLUTION=true``, so declared refs are
resolved), sends every case of ``cases.py`` in order and writes ``corpus.json``: each case's
request, its ``differs`` note, and under ``expect`` the answer reduced to the contract
(``runner.py``).

    python -m tests.conformance.record            # rewrites tests/conformance/corpus.json
    python -m tests.conformance.record --print    # prints it instead
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
from bench.dbl import DBL_PACKAGE, WORK_DIR, ensure_dbl, fake_provider, start_dbl

from tests.conformance.cases import CASES
from tests.conformance.runner import Run, observe

CORPUS = Path(__file__).with_name("corpus.json")
RECORDER_ENV = {"GATEWAY_ENABLE_CONTEXT_RESOLUTION": "true"}


async def record_against(url: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    run = Run(token=uuid.uuid4().hex[:10])
    recorded = []
    async with httpx.AsyncClient(base_url=url, headers=headers or {}, timeout=30) as http:
        for case in CASES:
            expect = await observe(http, case, run)
            print(f"{case['name']}: {expect['status']}", file=sys.stderr)
            recorded.append({**case, "expect": expect})
    return recorded


async def record(work: Path) -> dict[str, Any]:
    command = await asyncio.to_thread(ensure_dbl, work)
    run = Path(tempfile.mkdtemp(prefix="conformance-", dir=work))
    os.environ.update(RECORDER_ENV)  # start_dbl passes this process's environment on
    async with fake_provider(run, latency_ms=3.0) as provider, start_dbl(command, run, provider) as gateway:
        cases = await record_against(gateway.url, dict(gateway.headers))
    return {
        "recorded_against": DBL_PACKAGE,
        "recorder": {"env": RECORDER_ENV, "boundary": "bench/dbl.py"},
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.record", description=__doc__)
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help=f"the venv and run data ({WORK_DIR})")
    parser.add_argument("--print", action="store_true", help="print the corpus, do not write it")
    args = parser.parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    corpus = asyncio.run(record(args.work_dir))
    text = json.dumps(corpus, indent=1, ensure_ascii=False) + "\n"
    if args.print:
        print(text)
    else:
        CORPUS.write_text(text)
        print(f"wrote {CORPUS} ({len(corpus['cases'])} cases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
