"""`turngate dev` as a real process: Ctrl-C stops everything within seconds (also with an SSE
stream open and a turn in its provider call), a second Ctrl-C at once; its Temporal dev server
dies with it even when it is SIGKILLed; a port held by a stale dev server is reported clearly."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.stack import envelope
from turngate.devserver import DevServer, free_port, port_in_use

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")

#: Generous on a loaded machine; a stop measured here takes about two seconds.
STOP_DEADLINE_S = 30.0
START_DEADLINE_S = 90.0


class Dev:
    def __init__(self, tmp_path: Path, *, temporal_port: int | None = None) -> None:
        self.api_port = free_port()
        self.temporal_port = temporal_port or free_port()
        self.ui_port = free_port()
        self.log = tmp_path / "dev.log"
        env = dict(os.environ, TURNGATE_ECHO_DELAY_MS="100000", TURNGATE_LOG_LEVEL="INFO")
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "turngate", "dev", "--port", str(self.api_port)),
                *("--temporal-port", str(self.temporal_port), "--ui-port", str(self.ui_port)),
                *("--data-dir", str(tmp_path / "data")),
            ],
            env=env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.api_port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_up(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"turngate dev did not come up:\n{self.output()}")

    def dev_server_pid(self) -> int:
        """The Temporal dev server: the child started by the main thread."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        temporal = [int(pid) for pid in children if b"start-dev" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(temporal) == 1, children
        return temporal[0]

    def busy_turn_and_stream(self) -> None:
        """A turn in its (100 s) provider call and an open /tail stream while we stop."""

        def tail() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.stream("GET", f"{self.base}/tail", timeout=None) as r,
            ):
                for _ in r.iter_lines():
                    pass

        threading.Thread(target=tail, daemon=True).start()
        body = envelope("a slow one", correlation_id="c-slow")
        assert httpx.post(f"{self.base}/ingress/intent", json=body, timeout=30).status_code == 202

    def waiting_request(self) -> None:
        """A `?wait=execution` request held open by the slow turn: the API's graceful stop
        waits for it (up to its bound), which leaves room for a second Ctrl-C."""

        def post() -> None:
            body = envelope("another slow one", correlation_id="c-wait")
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(f"{self.base}/ingress/intent", params={"wait": "execution"}, json=body, timeout=60)

        threading.Thread(target=post, daemon=True).start()
        time.sleep(1.0)

    def wait_exit(self, timeout_s: float = STOP_DEADLINE_S) -> tuple[int, float]:
        started = time.monotonic()
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"turngate dev still running after {timeout_s} s:\n{self.output()}"
            ) from None
        return code, time.monotonic() - started


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True
        if state == "Z":  # exited, waiting for its (new) parent to reap it
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    started = Dev(tmp_path)
    try:
        yield started
    finally:
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait(10)


def test_ctrl_c_stops_dev_with_a_stream_open_and_a_turn_running(dev: Dev) -> None:
    dev.wait_up()
    ui_url = f"http://127.0.0.1:{dev.ui_port}"  # --ui-port reaches the printed and the web UI's links
    assert f"Temporal UI    {ui_url}" in dev.output()
    assert httpx.get(f"{dev.base}/ui/api/config", timeout=10).json()["temporal_ui_url"] == ui_url
    temporal = dev.dev_server_pid()
    dev.busy_turn_and_stream()
    dev.process.send_signal(signal.SIGINT)
    code, took = dev.wait_exit()
    assert code == 0, dev.output()
    assert _gone(temporal, 10), "the Temporal dev server outlived turngate dev"
    assert not port_in_use("127.0.0.1", dev.temporal_port)
    assert "worker stopped" in dev.output()
    print(f"stopped in {took:.1f} s")


def test_a_second_ctrl_c_stops_at_once(dev: Dev) -> None:
    dev.wait_up()
    temporal = dev.dev_server_pid()
    dev.busy_turn_and_stream()
    dev.waiting_request()
    dev.process.send_signal(signal.SIGINT)
    time.sleep(0.3)  # two signals that arrive together are delivered as one
    dev.process.send_signal(signal.SIGINT)
    code, took = dev.wait_exit()
    assert code == 130, dev.output()
    assert "turngate: a second signal: stopping now" in dev.output()
    assert _gone(temporal, 10)
    print(f"stopped {took:.1f} s after the second Ctrl-C")


def test_the_dev_server_dies_with_a_sigkilled_turngate_dev(dev: Dev) -> None:
    dev.wait_up()
    temporal = dev.dev_server_pid()
    dev.process.send_signal(signal.SIGKILL)
    dev.wait_exit()
    assert _gone(temporal, 10), "the Temporal dev server outlived a SIGKILLed turngate dev"
    deadline = time.monotonic() + 10
    while port_in_use("127.0.0.1", dev.temporal_port):
        assert time.monotonic() < deadline, "the Temporal port is still held"
        time.sleep(0.1)


def test_a_stale_dev_server_on_the_port_is_reported(tmp_path: Path, temporal_server: DevServer) -> None:
    stale = Dev(tmp_path, temporal_port=temporal_server.port)
    code, _ = stale.wait_exit(60)
    assert code == 1
    assert f"a Temporal server already answers on 127.0.0.1:{temporal_server.port}" in stale.output()
    assert "--temporal-port" in stale.output()
    assert "starting Temporal dev server" not in stale.output()  # nothing was started


STUCK_STOP = """
import asyncio, threading
from turngate.stop_signals import StopSignals

async def main():
    stop = asyncio.Event()
    StopSignals(stop, grace_s=1.0, on_force=lambda: print("on_force ran", flush=True)).install()
    print("ready", flush=True)
    await stop.wait()
    threading.Event().wait()  # a graceful stop that never finishes (blocks the event loop too)

asyncio.run(main())
"""


def test_a_stop_that_hangs_is_forced_after_its_grace_period() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", STUCK_STOP], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        code = child.wait(STOP_DEADLINE_S)
        took = time.monotonic() - started
        output = child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
    assert code == 130
    assert "turngate: not stopped within 1 s: stopping now" in output
    assert "on_force ran" in output
    assert took >= 1.0
