"""The per-turn budget check (:func:`turngate.ledger.budgets.spend_snapshot`) on a synthetic
ledger: how its time grows with the tenant's turns in the budget's period (a measurement, not a
test). Wall time and this process's CPU time are printed: on a shared machine the CPU time says
more. Each turn is an INTENT (with a key), an ALLOW DECISION with a spend plan and an EXECUTION
with usage and cost; another tenant's turns are interleaved (the check must not read them).

    .venv/bin/python bench/spend_check.py                     # 1,000 / 5,000 / 20,000 turns
    .venv/bin/python bench/spend_check.py --turns 2000 --runs 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore, spend_snapshot

PLAN = {"decision": "ALLOW", "spend": {"reserve": {"tokens": 40, "cost_micros": 9}}}


def turn(tenant: str, number: int) -> list[EventDraft]:
    cid = f"{tenant}-{number}"
    common = {"thread_id": cid, "turn_id": cid, "correlation_id": cid, "tenant_id": tenant}
    intent = {"payload": {"message": "hi"}, "principal": {"tenant_id": tenant, "key_id": "k1"}}
    execution = {"usage": {"input_tokens": 20, "output_tokens": 10}, "spend": {"cost_micros": 7}}
    return [
        EventDraft(kind=EventKind.INTENT, payload=intent, **common),
        EventDraft(kind=EventKind.DECISION, payload=PLAN, **common),
        EventDraft(kind=EventKind.EXECUTION, payload=execution, **common),
    ]


def measure(turns: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, LedgerStore(f"sqlite:///{Path(tmp) / 'l.sqlite3'}") as store:
        for start in range(0, turns, 500):
            drafts = [
                d
                for n in range(start, min(turns, start + 500))
                for t in ("acme", "globex")
                for d in turn(t, n)
            ]
            store.append_many(drafts)
        BudgetStore(store).set("acme", max_tokens=10**9)
        BudgetStore(store).set("acme", key_id="k1", max_cost_micros=10**9)
        now = datetime.now(UTC)
        times, cpu = [], []
        for _ in range(runs):
            started, started_cpu = time.perf_counter(), time.process_time()
            snapshot = spend_snapshot(store, "acme", "k1", now)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        assert snapshot is not None and snapshot.checks[0].settled.tokens == 30 * turns
    return {
        "turns": turns,
        "median_ms": statistics.median(times) * 1000,
        "max_ms": max(times) * 1000,
        "median_cpu_ms": statistics.median(cpu) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, action="append", help="tenant turns in the period (repeatable)")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    for turns in args.turns or [1000, 5000, 20000]:
        result = measure(turns, args.runs)
        print(
            f"{result['turns']:>6} turns: median {result['median_ms']:.1f} ms wall "
            f"({result['median_cpu_ms']:.1f} ms CPU), max {result['max_ms']:.1f} ms"
        )


if __name__ == "__main__":
    main()
