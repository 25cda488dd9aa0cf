"""bench/whatif.py must not rot: a tiny run (speed is not checked here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_whatif_bench(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "bench/whatif.py",
            "--turns",
            "300",
            "--runs",
            "1",
            "--json",
            "--keep",
            str(tmp_path),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["checked"], result["flipped"], result["unreproducible"]) == (300, 0, 0)
    assert result["median_decisions_per_cpu_s"] > 0
