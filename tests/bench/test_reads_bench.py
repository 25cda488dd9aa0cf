"""bench/reads.py must not rot: its table and verdicts from synthetic results (the measurement
itself builds large ledgers and is run by hand; docs/BENCHMARKS.md has the command)."""

from __future__ import annotations

from typing import Any

from bench.reads import evaluate, table


def _size(p50: float, *, backfill_s: float = 1.0, growth: float = 0.02) -> dict[str, Any]:
    reads = {
        "/snapshot deep offset": {"p50": p50, "p95": p50 * 2, "n": 30},
        "/verify ?thread_id (linear in the thread)": {"p50": 500.0, "p95": 900.0, "n": 30},
    }
    appends = {"with_summary_ms": 2.0 * (1 + growth), "without_summary_ms": 2.0, "growth": growth, "n": 200}
    return {"events": 100, "build_s": 1.0, "backfill_s": backfill_s, "reads": reads, "append": appends}


def test_targets_pass_at_and_under_their_bounds() -> None:
    results = {"sqlite": {100: _size(20.0), 1000: _size(30.0, backfill_s=60.0, growth=0.10)}}
    lines = evaluate(results)
    assert lines and all(line.endswith("PASS") for line in lines), lines
    assert not any("/verify" in line for line in lines)  # linear in the thread: no target
    rendered = table(results)
    assert "| /snapshot deep offset | 20.0 / 40.0 | 30.0 / 60.0 |" in rendered


def test_targets_miss_just_over_their_bounds() -> None:
    results = {"postgresql": {100: _size(20.0), 1000: _size(50.1, backfill_s=60.1, growth=0.101)}}
    verdicts = {line.split("  ")[-1] for line in evaluate(results) if " 1000 " in line}
    assert verdicts == {"MISS"}  # p50, flatness, backfill and append growth of the large size
    slower = {"sqlite": {100: _size(20.0), 1000: _size(30.1)}}  # x1.505: not flat
    assert [line for line in evaluate(slower) if line.endswith("MISS")] != []
