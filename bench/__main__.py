"""turngate benchmark suite: `python -m bench` or `make bench`.

Starts `turngate dev` on free loopback ports (the echo provider is the fake provider, answering
in --echo-latency-ms), runs the scenarios, prints a table of targets (PASS / MISS) and writes the
full results as JSON under bench/results/. A second turngate is started for the slow-provider
scenario (its provider delay and concurrency are set at start).

    python -m bench                         # everything, the issue's sizes (about 3 minutes)
    python -m bench --quick                 # tiny sizes: checks the suite works, not speed
    python -m bench --only sequential,thread --env TURNGATE_PROVIDER_ACTIVITY=local
    python -m bench --only sequential --dbl  # plus the side-by-side with the DBL gateway (bench/dbl.py)
    python -m bench --floor --only sequential,concurrent   # plus Temporal's floor (bench/floor.py)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import dbl, floor, floor_report, scenarios
from bench.stack import RunningTurngate, start_turngate
from bench.targets import evaluate, table

Scenario = Callable[[RunningTurngate, scenarios.Sizes], Awaitable[dict[str, Any]]]
# run in this order on one turngate; slow_provider gets its own
MAIN: dict[str, Scenario] = {
    "sequential": scenarios.sequential,
    "concurrent": scenarios.concurrent,
    "thread": scenarios.thread,
    "overload": scenarios.overload,
}
ALL = [*MAIN, "slow_provider"]
# the bench measures turns, not the per-key rate limit (one key sends everything here)
NO_RATE_LIMIT = {"TURNGATE_RATE_LIMIT_PER_S": "1000000", "TURNGATE_RATE_LIMIT_BURST": "1000000"}
RESULTS_DIR = Path(__file__).parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", help=f"comma-separated scenarios (default all: {','.join(ALL)})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test uses it)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for the turngate under test, e.g. TURNGATE_PROVIDER_ACTIVITY=local",
    )
    parser.add_argument("--echo-latency-ms", type=int, default=3, help="fake provider time to answer (3)")
    parser.add_argument("--url", help="measure a running turngate instead (slow_provider skipped)")
    parser.add_argument("--out", type=Path, help="JSON results file (default bench/results/...)")
    parser.add_argument("--json", action="store_true", help="print the JSON results, not the table")
    parser.add_argument(
        "--dbl", action="store_true", help="also side by side with the DBL gateway (bench/dbl.py)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also bare Temporal workflows of each turn shape, turngate beside them (bench/floor.py)",
    )
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else ALL
    unknown = sorted(set(chosen) - set(ALL))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    args.scenarios = [name for name in ALL if name in chosen]
    bad_env = [item for item in args.env if "=" not in item]
    if bad_env:
        parser.error(f"--env takes KEY=VALUE, got {bad_env[0]!r}")
    args.env_overrides = dict(item.split("=", 1) for item in args.env)
    return args


def progress(message: str) -> None:
    print(f"[bench {datetime.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


async def run_main_scenarios(args: argparse.Namespace, sizes: scenarios.Sizes) -> dict[str, Any]:
    names = [name for name in args.scenarios if name in MAIN]
    if not names:
        return {}
    env = {"TURNGATE_ECHO_LATENCY_MS": str(args.echo_latency_ms), **NO_RATE_LIMIT}
    if args.quick:
        env["TURNGATE_TURN_QUEUE_MAX"] = "5"  # so the tiny overload run still meets a full queue
    env.update(args.env_overrides)
    results: dict[str, Any] = {}
    if args.url:
        target = RunningTurngate(args.url, None, None, _key_header())
        return await _run_each(names, target, sizes, results)
    progress(f"starting turngate dev ({_env_text(env)})")
    async with start_turngate(env) as target:
        return await _run_each(names, target, sizes, results)


async def _run_each(
    names: list[str], target: RunningTurngate, sizes: scenarios.Sizes, results: dict[str, Any]
) -> dict[str, Any]:
    for name in names:
        progress(f"{name} ...")
        results[name] = await MAIN[name](target, sizes)
        progress(f"{name}: {json.dumps(results[name])}")
    return results


async def run_slow_provider(args: argparse.Namespace, sizes: scenarios.Sizes) -> dict[str, Any]:
    if "slow_provider" not in args.scenarios:
        return {}
    if args.url:
        progress("slow_provider skipped: it needs its own turngate (provider delay is set at start)")
        return {}
    env = {
        "TURNGATE_ECHO_LATENCY_MS": str(sizes.slow_delay_ms),
        "TURNGATE_LLM_CONCURRENCY": str(sizes.slow_concurrency),
        **NO_RATE_LIMIT,
        **args.env_overrides,
    }
    progress(f"starting turngate dev for slow_provider ({_env_text(env)})")
    async with start_turngate(env) as target:
        progress("slow_provider ...")
        result = await scenarios.slow_provider(target, sizes)
    progress(f"slow_provider: {json.dumps(result)}")
    return {"slow_provider": result}


def _env_text(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


def _key_header() -> dict[str, str]:
    key = os.environ.get("TURNGATE_BENCH_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "temporalio": importlib.metadata.version("temporalio"),
        "commit": commit or None,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = scenarios.QUICK if args.quick else scenarios.Sizes()
    info = machine()
    results = await run_main_scenarios(args, sizes)
    if args.floor:
        results["floor"] = await floor.floor(sizes, progress)
    results.update(await run_slow_provider(args, sizes))
    if args.dbl:
        results["dbl_side_by_side"] = await dbl.side_by_side(sizes, args.echo_latency_ms)
    return {
        "machine": info,
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "quick": args.quick,
        "env": args.env_overrides,
        "sizes": vars(sizes),
        "results": results,
        "targets": evaluate(results),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    out = args.out or RESULTS_DIR / f"{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        if args.quick:
            print("--quick: sizes too small for the figures to mean anything; checks the suite runs")
        print(table(report["targets"]))
        if args.dbl:
            print(dbl.render(report["results"]["dbl_side_by_side"]))
        if args.floor:
            print(floor_report.render(report["results"], floor.turngate_shape(args.env_overrides)))
    progress(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
