"""TURNGATE_EVENT_LOOP: uvloop by default where installed, asyncio's loop on request, a clear
refusal of anything else."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import uvloop

from turngate.event_loop import EventLoopConfigError, loop_factory

PROBE = (
    "import asyncio\n"
    "from turngate.event_loop import loop_factory\n"
    "with asyncio.Runner(loop_factory=loop_factory()) as runner:\n"
    "    print(type(runner.get_loop()).__module__)\n"
)


@pytest.mark.parametrize(
    ("choice", "expected"), [("auto", uvloop.new_event_loop), (" UVLOOP ", uvloop.new_event_loop)]
)
def test_uvloop_is_the_default_where_installed(choice: str, expected: object) -> None:
    assert loop_factory(choice) is expected


def test_asyncio_can_be_asked_for() -> None:
    assert loop_factory("asyncio") is None


@pytest.mark.parametrize("choice", ["", "uv", "trio"])
def test_anything_else_is_refused_with_the_choices(choice: str) -> None:
    with pytest.raises(EventLoopConfigError, match="auto, uvloop, asyncio"):
        loop_factory(choice)


def test_a_command_runs_on_the_chosen_loop_and_refuses_a_bad_choice() -> None:
    def run(value: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TURNGATE_EVENT_LOOP": value}
        return subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
        )

    assert run("auto").stdout.split()[-1] == "uvloop"
    assert run("asyncio").stdout.split()[-1].startswith("asyncio")
    refused = subprocess.run(
        [sys.executable, "-m", "turngate", "config"],
        env={**os.environ, "TURNGATE_EVENT_LOOP": "fast"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "TURNGATE_EVENT_LOOP='fast': expected one of auto, uvloop, asyncio" in refused.stderr


def test_runner_with_the_default_factory_runs_a_coroutine() -> None:
    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        assert runner.run(asyncio.sleep(0, "done")) == "done"
        assert isinstance(runner.get_loop(), uvloop.Loop)
