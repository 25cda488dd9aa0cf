"""The benchmark suite must not rot: a tiny run of every scenario (speed is not checked here,
only that the suite works and that overload loses nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.__main__ import ALL, parse_args
from bench.targets import evaluate

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_of_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == set(ALL)
    assert {row["scenario"] for row in report["targets"]} == set(ALL)
    assert "PASS" in done.stdout or "MISS" in done.stdout  # the table was printed
    assert results["sequential"]["latency_ms"]["n"] == 5
    assert results["concurrent"]["errors"] == 0
    # A turn allowed with a regular provider activity, without refs: 14 history events (the turn's
    # current shape, docs/WORKFLOW.md: 13, and the outcome added to the memo as it ends).
    assert results["sequential"]["history_events_per_turn"]["median"] == 14
    cpu = results["concurrent"]["cpu_ms_per_turn"]
    assert set(cpu) == {"api", "workers", "temporal", "turngate"}
    assert cpu["temporal"] > 0 and cpu["turngate"] == pytest.approx(cpu["api"] + cpu["workers"], abs=0.2)
    assert results["thread"]["not_executed"] == 0
    overload = results["overload"]
    assert overload["refused"].get("queue.full", 0) > 0, "the tiny queue (5) was never full"
    assert overload["lost"] == 0 and overload["recovered"], overload
    assert results["overload"]["peak_rss_mb"]["turngate"] > 0
    assert results["slow_provider"]["errors"] == 0


def test_arguments_are_checked() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--only", "sequential,nope"])
    with pytest.raises(SystemExit):
        parse_args(["--env", "NO_EQUALS_SIGN"])
    args = parse_args(["--only", "thread,sequential", "--env", "A=b=c"])
    assert args.scenarios == ["sequential", "thread"] and args.env_overrides == {"A": "b=c"}


def test_targets_pass_and_miss() -> None:
    rows = evaluate(
        {
            "sequential": {"latency_ms": {"p50": 40.0, "p99": 120.0}},
            "overload": {"lost": 0, "recovered": True, "peak_rss_mb": {"turngate": 300.0}},
        }
    )
    status = {row["target"]: row["status"] for row in rows}
    assert status["sequential p50"] == "PASS" and status["sequential p99"] == "MISS"
    assert status["overload, lost or partial"] == "PASS"
    assert status["worker+API peak RSS under overload"] == "MISS"
    history = {"n": 3, "min": 15, "median": 15, "max": 15}
    reported = evaluate({"sequential": {"history_events_per_turn": history}})
    assert [row["status"] for row in reported if row["target"] == "history events per turn"] == ["-"]
