"""bench/ledger_signals.py must not rot: one SQLite run (speed is not checked here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_sqlite_run() -> None:
    done = subprocess.run(
        [sys.executable, "bench/ledger_signals.py", "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=300,  # bounds a hang only
    )
    results = json.loads(done.stdout)
    assert set(results) == {"sqlite"}, done.stderr[-2000:]
    figures = results["sqlite"]
    assert figures["change_marker_ms"] > 0 and figures["wake_ms"]["n"] == 20
    assert set(figures["status"].values()) <= {"PASS", "FAIL"}
