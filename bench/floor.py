"""The floor scenario (``python -m bench --floor``): Temporal's own cost for each turn shape.

A Temporal dev server started by turngate's launcher with the flags `turngate dev` uses (SQLite
file, raised poll throttles, eager start allowed), fresh for the scenario; each shape of
:mod:`bench.floor_shapes` runs in its own process (:mod:`bench.floor_run`: its worker and its
starters, sandbox on as turngate runs; today's shape also with the sandbox off). The figures
sit beside turngate's in :mod:`bench.floor_report`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.floor_shapes import SHAPES
from bench.scenarios import Sizes
from turngate.devserver import DevServer, free_port

#: An allowed turn in the default configuration (the turn's shape 4, docs/WORKFLOW.md).
TODAY = "1 local + 1 regular"
LOCAL_PROVIDER = "1 local + 1 local provider"


def turngate_shape(env: dict[str, str]) -> str:
    """The floor shape a turngate configuration's allowed turn has."""
    return LOCAL_PROVIDER if env.get("TURNGATE_PROVIDER_ACTIVITY") == "local" else TODAY


async def _run_shape(server: DevServer, shape: str, sizes: Sizes, *, sandbox: bool) -> dict[str, Any]:
    assert server.process is not None
    command = [sys.executable, "-m", "bench.floor_run", server.address, shape]
    command += ["--server-pid", str(server.process.pid), "--clients", str(sizes.clients)]
    command += ["--seconds", str(sizes.concurrent_s), "--turns", str(sizes.sequential_turns)]
    command += ["--warmup", str(sizes.warmup), "--sandbox" if sandbox else "--no-sandbox"]
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"floor shape {shape!r} failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


async def floor(sizes: Sizes, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every shape with the sandbox on, and today's shape with it off; keyed by label."""
    data = Path(tempfile.mkdtemp(prefix="turngate-bench-floor-"))
    server = DevServer(
        db_file=data / "temporal.sqlite3",
        port=free_port(),
        ui_port=free_port(),
        log_file=data / "temporal.log",
    )
    await server.check_port_free()
    server.start()
    shapes: dict[str, Any] = {}
    try:
        await server.wait_ready()
        runs = [(shape, True) for shape in SHAPES] + [(TODAY, False)]
        for shape, sandbox in runs:
            label = shape if sandbox else f"{shape}, sandbox off"
            progress(f"floor: {label} ...")
            shapes[label] = await _run_shape(server, shape, sizes, sandbox=sandbox)
            progress(f"floor: {label}: {json.dumps(shapes[label])}")
    finally:
        server.stop()
    return shapes
