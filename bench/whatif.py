"""`turngate policy whatif` throughput and memory on a synthetic ledger (a measurement, not a test).

The ledger is `bench/verify.py`'s (:func:`bench.verify.build_ledger`: realistic INTENTs, every
continuation declaring the previous turn, DECISIONs made by ``decide``), recorded here under
``turngate.policies.max_user_messages`` with its default limit and without artifacts (what-if
reads none). The candidate is then, in a fresh process (so the peak RSS is what-if's alone):

- ``max_user_messages`` with another limit (``--limit``, default 3): another config digest, and
  no turn of the bench's threads declares enough messages to change: every turn is decided
  again and none flips (memory shows the cost of the run itself);
- ``deny_all`` with ``--candidate deny_all``: every ALLOWed turn flips (memory then includes
  the report, which lists every flip).

    .venv/bin/python bench/whatif.py                          # 100,000 recorded INTENTs
    .venv/bin/python bench/whatif.py --turns 10000 --runs 3   # a quicker one, three runs
    .venv/bin/python bench/whatif.py --turns 20000 --workers 1
    .venv/bin/python bench/whatif.py --turns 20000 --candidate deny_all
    .venv/bin/python bench/whatif.py --keep /tmp/ledger-100k   # builds once; later runs reuse it

Besides wall time it reports CPU seconds (this process and its forked workers): the machine may
be shared, and wall time then says more about the neighbours than about what-if.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify import build_ledger, peak_rss_mb  # bench/verify.py, beside this file

from turngate.core.context import load_context_config
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore

TARGET_SECONDS_PER_100K = 30.0
RECORDED = "turngate.policies.max_user_messages"
CANDIDATES = {"max_user_messages": RECORDED, "deny_all": "turngate.policies.deny_all"}


def _url(workdir: Path) -> str:
    return f"sqlite:///{(workdir / 'ledger.sqlite3').as_posix()}"


def build_step(turns: int, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    store = LedgerStore(_url(workdir))
    try:
        built = build_ledger(store, turns, policy=load_policy(RECORDED))
    finally:
        store.close()
    return {
        "turns": turns,
        "events": built.events,
        "denied": built.denied,
        "build_s": round(built.seconds, 1),
    }


def whatif_step(workdir: Path, candidate: str, workers: int | None) -> dict[str, Any]:
    from turngate.policy_lifecycle.whatif import run_whatif

    store = LedgerStore(_url(workdir))
    cpu_before = _cpu_seconds()
    try:
        report = run_whatif(
            store,
            load_policy(CANDIDATES[candidate]),
            context_config=load_context_config(None, {}),
            workers=workers,
        )
    finally:
        store.close()
    cpu = _cpu_seconds() - cpu_before
    return {
        "cpu_s": round(cpu, 2),
        "decisions_per_cpu_s": round(report.checked / max(cpu, 1e-9)),
        "checked": report.checked,
        "flipped": len(report.flipped),
        "unreproducible": report.unreproducible,
        "whatif_s": round(report.duration_ms / 1000, 2),
        "decisions_per_s": round(report.decisions_per_s),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_rss_workers_mb": round(peak_rss_mb(resource.RUSAGE_CHILDREN), 1),
    }


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the forked range workers): on a
    shared machine wall time depends on the neighbours, CPU time much less."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _child(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, *args]
    out = subprocess.run(
        command, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time `turngate policy whatif` (run_whatif) on a synthetic ledger."
    )
    parser.add_argument("--turns", type=int, default=100_000, help="recorded INTENTs (default 100,000)")
    parser.add_argument(
        "--runs", type=int, default=3, help="what-if runs on the same ledger (median reported)"
    )
    parser.add_argument("--workers", type=int, help="processes (default: run_whatif decides, one per core)")
    parser.add_argument("--candidate", choices=sorted(CANDIDATES), default="max_user_messages")
    parser.add_argument("--limit", default="3", help="the max_user_messages candidate's limit (default 3)")
    parser.add_argument("--keep", help="build the ledger in this directory and keep it")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument("--step", choices=("build", "whatif"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step == "build":
        print(json.dumps(build_step(args.turns, Path(args.dir))))
        return 0
    if args.step == "whatif":
        print(json.dumps(whatif_step(Path(args.dir), args.candidate, args.workers)))
        return 0
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="turngate-bench-whatif-"))
    try:
        if (workdir / "ledger.sqlite3").exists():  # --keep of an earlier run: measure it again
            result = {"turns": args.turns, "events": None, "reused_ledger": True}
        else:
            started = time.perf_counter()
            result = _child("--step", "build", "--dir", str(workdir), "--turns", str(args.turns))
            result["build_wall_s"] = round(time.perf_counter() - started, 1)
        step = ["--step", "whatif", "--dir", str(workdir), "--candidate", args.candidate]
        step += ["--workers", str(args.workers)] if args.workers else []
        env = {"TURNGATE_POLICY_MAX_USER_MESSAGES": args.limit}
        runs = [_child(*step, env=env) for _ in range(max(1, args.runs))]
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    result |= {
        "candidate": args.candidate,
        "runs_s": [run["whatif_s"] for run in runs],
        "median_s": statistics.median(run["whatif_s"] for run in runs),
        "median_decisions_per_s": round(statistics.median(run["decisions_per_s"] for run in runs)),
        "median_cpu_s": statistics.median(run["cpu_s"] for run in runs),
        "median_decisions_per_cpu_s": round(statistics.median(run["decisions_per_cpu_s"] for run in runs)),
        "checked": runs[-1]["checked"],
        "flipped": runs[-1]["flipped"],
        "unreproducible": runs[-1]["unreproducible"],
        "peak_rss_mb": max(run["peak_rss_mb"] for run in runs),
        "peak_rss_workers_mb": max(run["peak_rss_workers_mb"] for run in runs),
    }
    target = TARGET_SECONDS_PER_100K * args.turns / 100_000
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['turns']} recorded INTENTs: what-if with {args.candidate} "
            f"in {result['runs_s']} s (median {result['median_s']} s, {result['median_decisions_per_s']}/s; "
            f"{result['median_cpu_s']} CPU s, {result['median_decisions_per_cpu_s']} per CPU s), "
            f"{result['checked']} checked, {result['flipped']} flipped; peak RSS {result['peak_rss_mb']} MB "
            f"(second process {result['peak_rss_workers_mb']} MB); target {target:.1f} s: "
            + ("met" if result["median_s"] <= target else "MISSED")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
