"""The worker supervisor with real child processes (stand-ins that sleep or exit at once):
restart of a child that dies, a loud stop when children keep dying, signals stop every child,
and a child whose supervisor was SIGKILLed stops by itself."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from turngate.cli import build_parser
from turngate.settings import Settings
from turngate.worker.dev_workers import dev_worker_processes
from turngate.worker.processes import PARENT_PID_ENV, WorkerSupervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


async def _until(check, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_killed_child_is_restarted_and_a_stop_ends_every_child() -> None:
    supervisor = WorkerSupervisor(2, command=SLEEPER)
    stop = asyncio.Event()
    run = asyncio.create_task(supervisor.run(stop))
    await _until(lambda: len(supervisor.children) == 2)
    first = {slot: proc.pid for slot, proc in supervisor.children.items()}
    os.kill(first[0], signal.SIGKILL)
    await _until(lambda: supervisor.children[0].pid != first[0])
    assert supervisor.children[1].pid == first[1]  # the other child was left alone
    stop.set()
    assert await asyncio.wait_for(run, 60) == 0
    assert all(proc.returncode is not None for proc in supervisor.children.values())


async def test_children_that_keep_dying_stop_the_supervisor_loudly(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = WorkerSupervisor(1, command=CRASHER, restart_limit=2, restart_window_s=600)
    started = time.monotonic()
    assert await asyncio.wait_for(supervisor.run(asyncio.Event()), 120) == 1
    assert "over the limit of 2" in caplog.text
    assert caplog.text.count("restarting it") == 2  # exits 1 and 2 restarted, the third gives up
    assert time.monotonic() - started < 120


async def test_exits_under_the_limit_spread_over_the_window_are_restarted() -> None:
    """Just under the limit: as many exits as the limit allows are restarted, then a stop is clean."""
    supervisor = WorkerSupervisor(1, command=CRASHER, restart_limit=3, restart_window_s=600)
    stop = asyncio.Event()
    run = asyncio.create_task(supervisor.run(stop))
    await _until(lambda: len(supervisor._exits) == 3)
    stop.set()
    # The fourth exit would be over the limit; a stop that comes first still ends with 0 or 1.
    assert await asyncio.wait_for(run, 60) in (0, 1)


def test_a_worker_whose_supervisor_was_killed_stops_by_itself(tmp_path: Path) -> None:
    """`turngate worker --processes 2` SIGKILLed: its children notice and exit (no orphans)."""
    script = (
        "import asyncio, os\n"
        "from turngate.worker.processes import stop_when_orphaned\n"
        "stop = asyncio.Event()\n"
        "asyncio.run(stop_when_orphaned(stop))\n"
        "print('stopped', flush=True)\n"
    )
    code = (
        "import asyncio, sys\n"
        "from turngate.worker.processes import WorkerSupervisor\n"
        f"asyncio.run(WorkerSupervisor(2, command=[sys.executable, '-c', {script!r}]).run(asyncio.Event()))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    children_file = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    deadline = time.monotonic() + 60
    while len(children_file.read_text().split()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    children = [int(c) for c in children_file.read_text().split()]
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 30
    while any(_alive(c) for c in children):
        assert time.monotonic() < deadline, "an orphaned worker kept running"
        time.sleep(0.1)
    assert parent.stdout is not None and parent.stdout.read().count(b"stopped") == 2


def test_a_child_without_a_supervisor_does_not_watch_one() -> None:
    from turngate.worker.processes import stop_when_orphaned

    stop = asyncio.Event()
    asyncio.run(asyncio.wait_for(stop_when_orphaned(stop, {PARENT_PID_ENV: ""}), 5))
    assert not stop.is_set()


def test_the_process_counts_of_worker_and_dev() -> None:
    assert [dev_worker_processes(None, cpus) for cpus in (1, 2, 3, 4, 8)] == [0, 0, 1, 2, 4]
    cpus = os.cpu_count() or 1
    assert dev_worker_processes(None) == (cpus // 2 if cpus > 2 else 0)
    assert dev_worker_processes(0, 8) == 0
    assert dev_worker_processes(3, 1) == 3
    assert Settings(TURNGATE_WORKER_PROCESSES="0").worker_processes == 0
    assert Settings(TURNGATE_WORKER_PROCESSES="3").worker_processes == 3
    for bad in ("-1", "two"):
        with pytest.raises(ValidationError, match="TURNGATE_WORKER_PROCESSES"):
            Settings(TURNGATE_WORKER_PROCESSES=bad)
    parser = build_parser()
    assert parser.parse_args(["worker"]).processes == 1
    assert parser.parse_args(["worker", "--processes", "3"]).processes == 3
    assert parser.parse_args(["dev", "--worker-processes", "0"]).worker_processes == 0
    assert parser.parse_args(["dev"]).worker_processes is None  # TURNGATE_WORKER_PROCESSES or per core
    for bad in (["worker", "--processes", "0"], ["dev", "--worker-processes", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_each_worker_process_gets_its_own_metrics_port() -> None:
    from turngate.telemetry.metrics import WORKER_METRICS_ENV
    from turngate.worker.processes import METRICS_BIND_ENV, child_env

    assert METRICS_BIND_ENV == WORKER_METRICS_ENV
    assert child_env({METRICS_BIND_ENV: "0.0.0.0:9464"}, 0)[METRICS_BIND_ENV] == "0.0.0.0:9464"
    assert child_env({METRICS_BIND_ENV: "0.0.0.0:9464"}, 2)[METRICS_BIND_ENV] == "0.0.0.0:9466"
    assert child_env({METRICS_BIND_ENV: "[::1]:9464"}, 1)[METRICS_BIND_ENV] == "[::1]:9465"
    assert child_env({METRICS_BIND_ENV: "127.0.0.1:0"}, 3)[METRICS_BIND_ENV] == "127.0.0.1:0"
    assert METRICS_BIND_ENV not in child_env({}, 1)
    assert child_env({}, 1)[PARENT_PID_ENV] == str(os.getpid())
