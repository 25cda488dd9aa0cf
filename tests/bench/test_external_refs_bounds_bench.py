"""bench/external_refs_bounds.py must not rot: one run of each activity bound, without the turn
(speed is not checked here: each call ends with the bound's own error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_run_of_each_activity_bound() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.external_refs_bounds", "--runs", "1", "--no-turn", "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=300,  # bounds a hang only
    )
    results = json.loads(done.stdout or "{}")
    assert {name: row["ended_with"] for name, row in results.items()} == {
        "fetch cut": ["workbench.timeout"],
        "embedder cut": ["external_refs.attempt_timeout"],
        "embedder timeout": ["provider.timeout"],
    }, done.stderr[-2000:]
    assert all(row["n"] == 1 and row["status"] in ("PASS", "FAIL") for row in results.values())
