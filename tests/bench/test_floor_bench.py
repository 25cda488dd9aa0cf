"""The floor scenario: a tiny run (it works, each shape counts its history), and the targets
measured against the floor at, just under and just over their bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.floor import LOCAL_PROVIDER, TODAY, turngate_shape
from bench.floor_report import render, targets

ROOT = Path(__file__).resolve().parents[2]


def _floor(sdk: float = 20.0, server: float = 30.0, turns_per_s: float = 20.0) -> dict[str, Any]:
    return {
        "turns_per_s": turns_per_s,
        "latency_ms": {"p99": 100.0},
        "sequential_latency_ms": {"p50": 50.0},
        "cpu_ms_per_turn": {"sdk": sdk, "temporal": server},
        "history_events_per_turn": {"median": 14},
    }


def _results(
    api_worker: float, temporal: float, turns_per_s: float, dbl: dict[str, Any] | None = None
) -> Any:
    results: dict[str, Any] = {
        "floor": {TODAY: _floor()},
        "concurrent": {
            "turns_per_s": turns_per_s,
            "latency_ms": {"p99": 200.0},
            "cpu_ms_per_turn": {
                "api": api_worker,
                "workers": 0.0,
                "turngate": api_worker,
                "temporal": temporal,
            },
        },
        "sequential": {"latency_ms": {"p50": 60.0}, "history_events_per_turn": {"median": 15}},
    }
    if dbl:
        results["dbl_side_by_side"] = {"figures": dbl}
    return results


@pytest.mark.parametrize(
    ("api_worker", "temporal", "turns_per_s", "met"),
    [
        (45.0, 33.0, 17.0, [True, True, True]),  # at each bound (floor: 20 ms SDK, 30 ms server, 20/s)
        (44.9, 32.9, 17.1, [True, True, True]),  # just under
        (45.1, 33.1, 16.9, [False, False, False]),  # just over
    ],
)
def test_floor_targets_at_under_and_over(
    api_worker: float, temporal: float, turns_per_s: float, met: list[bool]
) -> None:
    rows = targets(_results(api_worker, temporal, turns_per_s), TODAY)
    assert [row[2] for row in rows] == met


@pytest.mark.parametrize(
    ("throughput", "p99", "p50", "met"),
    [
        (0.8, 0.99, 0.75, [True, True, True]),
        (0.79, 1.0, 0.76, [False, False, False]),
    ],
)
def test_dbl_targets(throughput: float, p99: float, p50: float, met: list[bool]) -> None:
    dbl = {
        "concurrent_turns_per_s": {"ratio": throughput},
        "concurrent_p99_ms": {"ratio": p99},
        "sequential_p50_ms": {"ratio": p50},
    }
    rows = targets(_results(40.0, 30.0, 20.0, dbl), TODAY)
    assert [row[2] for row in rows[3:]] == met


def test_render_prints_each_figure_and_verdict() -> None:
    text = render(_results(45.1, 33.0, 20.0), TODAY)
    assert "FAIL  API+worker CPU/turn <= floor SDK + 25 ms: +25.1 ms" in text
    assert "PASS  Temporal CPU/turn <= 1.1x floor: 1.10x" in text
    assert "history events/turn" in text


def test_the_turn_shape_follows_the_provider_activity() -> None:
    assert turngate_shape({}) == TODAY
    assert turngate_shape({"TURNGATE_PROVIDER_ACTIVITY": "local"}) == LOCAL_PROVIDER


def test_quick_floor_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--floor",
            "--only",
            "sequential,concurrent",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    floor = json.loads(out.read_text())["results"]["floor"]
    # each shape's history is fixed by its commands: the figure is a count, not a measurement
    events = {label: run["history_events_per_turn"]["median"] for label, run in floor.items()}
    assert events == {
        "3 local + 1 regular": 14,
        LOCAL_PROVIDER: 7,
        "1 local": 6,
        TODAY: 13,  # turngate's allowed turn: its search attributes are one event more
        f"{TODAY}, sandbox off": 13,
    }
    assert all(run["turns"] > 0 and run["cpu_ms_per_turn"]["temporal"] > 0 for run in floor.values())
    assert "turngate beside the floor of its shape" in done.stdout
    assert "PASS" in done.stdout or "FAIL" in done.stdout
