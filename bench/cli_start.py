"""`turngate` start-up: CPU of the whole process (user + system) for `turngate --help`, and for
the client side of a `turngate chat` round trip against a running turngate.

Each command runs --runs times (after one warm-up run that is not counted) in a fresh process;
its CPU is the operating system's accounting of that finished child. The median is compared with
the target (at most 0.3 s each): a command line that loads what it does not use misses it.

    python bench/cli_start.py                   # starts `turngate dev` for the chat round trips
    python bench/cli_start.py --url URL         # against a running turngate (key: --api-key or
                                                # TURNGATE_API_KEY)
    python bench/cli_start.py --runs 15 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/cli_start.py`

from bench.stack import start_turngate

#: CPU (user + system) of the whole process, median, for each command.
TARGET_CPU_S = 0.3
MESSAGE = "hello from the start-up benchmark"
#: A bound on one command that hangs (a failure, not a figure).
HANG_S = 120


def run_once(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """CPU, wall time and peak memory of one finished child running ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_S, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of the children is the largest so far, not this child's: reported as such
    return {"cpu_s": cpu, "wall_s": wall, "max_rss_mib": after.ru_maxrss / 1024}


def measure(command: list[str], env: dict[str, str], runs: int) -> dict[str, Any]:
    run_once(command, env)  # warm-up: bytecode caches, page cache
    samples = [run_once(command, env) for _ in range(runs)]
    cpu = [s["cpu_s"] for s in samples]
    wall = [s["wall_s"] for s in samples]
    median = statistics.median(cpu)
    return {
        "command": shlex.join(["turngate", *command[3:]]),
        "runs": runs,
        "cpu_s": {"median": round(median, 3), "min": round(min(cpu), 3), "max": round(max(cpu), 3)},
        "wall_s": {"median": round(statistics.median(wall), 3), "max": round(max(wall), 3)},
        "max_rss_mib": round(max(s["max_rss_mib"] for s in samples), 1),
        "target_cpu_s": TARGET_CPU_S,
        "status": "PASS" if median <= TARGET_CPU_S else "FAIL",
    }


def measure_all(url: str, api_key: str | None, runs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNGATE_")}
    turngate = [sys.executable, "-m", "turngate"]
    chat_env = {**env, "TURNGATE_URL": url, **({"TURNGATE_API_KEY": api_key} if api_key else {})}
    return {
        "help": measure([*turngate, "--help"], env, runs),
        "chat": measure([*turngate, "chat", MESSAGE], chat_env, runs),
    }


def render(results: dict[str, Any]) -> str:
    lines = [f"{'command':<52} {'CPU s median (min-max)':<24} {'wall s':<8} target    status"]
    for figures in results.values():
        cpu = figures["cpu_s"]
        lines.append(
            f"{figures['command']:<52} {cpu['median']:.3f} ({cpu['min']:.3f}-{cpu['max']:.3f}){'':<5} "
            f"{figures['wall_s']['median']:<8.3f} <= {TARGET_CPU_S} s  {figures['status']}"
        )
    return "\n".join(lines)


async def against_dev(runs: int) -> dict[str, Any]:
    async with start_turngate({"TURNGATE_ECHO_LATENCY_MS": "3"}) as target:
        bearer = target.headers.get("Authorization", "")
        key = bearer.removeprefix("Bearer ") or None
        return await asyncio.to_thread(measure_all, target.url, key, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="counted runs of each command (default 7)")
    parser.add_argument("--url", help="a running turngate (default: start `turngate dev`)")
    parser.add_argument("--api-key", help="its API key (default: TURNGATE_API_KEY)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.url:
        results = measure_all(args.url, args.api_key or os.environ.get("TURNGATE_API_KEY"), args.runs)
    else:
        results = asyncio.run(against_dev(args.runs))
    print(json.dumps(results, indent=2) if args.json else render(results))
    return 0 if all(figures["status"] == "PASS" for figures in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
