"""PostgreSQL for the ledger tests: an existing server, else a throwaway cluster, else a loud skip.

1. The server named by ``TURNGATE_TEST_POSTGRES_URL`` (default
   ``postgresql+psycopg://postgres@127.0.0.1:5432/test``), if it answers. Each test gets a fresh
   schema in a database created for the session, or a fresh database of its own
   (``tg_test_<random>``, dropped afterwards), so the user in the URL needs ``CREATEDB``; the
   database in the URL is only used to create and drop those databases.
2. Otherwise a throwaway cluster: ``initdb`` into a temporary directory and ``pg_ctl start`` on a
   free port (unix socket in that directory, fsync off), stopped and deleted at the end of the
   session. The binaries come from ``TURNGATE_TEST_POSTGRES_BIN`` (a directory), else ``PATH``,
   else ``/usr/lib/postgresql/<version>/bin``. initdb and postgres refuse to run as root: as root
   they run as the ``postgres`` user through ``runuser`` (or ``su``).
3. Otherwise every PostgreSQL test is skipped with the reason, and the terminal summary says so.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from turngate.ledger.engine import (
    normalize_url,
)

ENV_URL = "TURNGATE_TEST_POSTGRES_URL"
ENV_BIN = "TURNGATE_TEST_POSTGRES_BIN"
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DATABASE_PREFIX = "tg_test_"
PROBE_TIMEOUT_S = 3


@dataclass
class Status:
    """What the session found (printed in the terminal summary)."""

    description: str | None = None
    skip_reason: str | None = None
    notes: list[str] = field(default_factory=list)


STATUS = Status()


def _connect_kwargs(url: URL) -> dict[str, object]:
    params: dict[str, object] = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": url.database,
        "connect_timeout": PROBE_TIMEOUT_S,
    }
    params.update({key: value for key, value in url.query.items() if isinstance(value, str)})
    return {key: value for key, value in params.items() if value is not None}


def admin_connection(url: URL) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(**_connect_kwargs(url), autocommit=True)  # type: ignore[arg-type]


def probe(url: URL) -> str | None:
    """None if the server answers, else why not."""
    try:
        with admin_connection(url) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def safe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


class PostgresServer:
    """A server on which the tests may create and drop databases.

    Isolation: :meth:`fresh_schema` (the default for a test: a schema of its own in one database
    shared by the session, ``search_path`` set through the URL; about a millisecond) or
    :meth:`fresh_database` (a database of its own, for tests that depend on what is per
    database: NOTIFY channels and advisory locks; CREATE DATABASE costs 20-250 ms).
    """

    def __init__(self, admin_url: URL, description: str, cluster: ThrowawayCluster | None = None) -> None:
        self.admin_url = admin_url
        self.description = description
        self.cluster = cluster
        self._shared_url: URL | None = None

    def create_database(self) -> str:
        """A new empty database; returns its URL (with the password, for the store)."""
        name = f"{DATABASE_PREFIX}{uuid.uuid4().hex[:16]}"
        with admin_connection(self.admin_url) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            # A test database need not survive a power cut: do not wait for the WAL flush.
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
            )
        # pg_trgm in public, as a database would have it: the thread-id search index's operator
        # class (created by the migration otherwise, in a test's own schema, dropped with it)
        with admin_connection(self.admin_url.set(database=name)) as conn:
            available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
            if available.fetchone():
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def drop_database(self, url: str) -> None:
        name = make_url(url).database
        assert name and name.startswith(DATABASE_PREFIX), name
        with admin_connection(self.admin_url) as conn:
            # FORCE: a test that failed may have left a connection behind.
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    @contextlib.contextmanager
    def fresh_database(self) -> Iterator[str]:
        url = self.create_database()
        try:
            yield url
        finally:
            self.drop_database(url)

    def create_schema(self) -> str:
        """A new empty schema in the session's shared database; its URL sets the search_path."""
        if self._shared_url is None:
            self._shared_url = make_url(self.create_database())
        name = f"{DATABASE_PREFIX}{uuid.uuid4().hex[:16]}"
        with admin_connection(self._shared_url) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        url = self._shared_url.update_query_dict({"options": f"-csearch_path={name}"})
        return url.render_as_string(hide_password=False)

    def drop_schema(self, url: str) -> None:
        parsed = make_url(url)
        name = str(parsed.query["options"]).removeprefix("-csearch_path=")
        assert name.startswith(DATABASE_PREFIX), name
        with admin_connection(parsed.difference_update_query(["options"])) as conn:
            conn.execute("SET lock_timeout = '10s'")  # a leaked transaction fails the test loudly
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

    @contextlib.contextmanager
    def fresh_schema(self) -> Iterator[str]:
        url = self.create_schema()
        try:
            yield url
        finally:
            self.drop_schema(url)

    def close(self) -> None:
        if self._shared_url is not None:
            with contextlib.suppress(Exception):
                self.drop_database(self._shared_url.render_as_string(hide_password=False))
            self._shared_url = None
        if self.cluster is not None:
            self.cluster.stop()


# --------------------------------------------------------------------------- throwaway cluster


def find_binaries() -> tuple[Path | None, str]:
    """(directory holding initdb and pg_ctl, or None; where we looked)."""
    configured = os.environ.get(ENV_BIN)
    if configured:
        candidates = [Path(configured)]
    else:
        candidates = []
        initdb = shutil.which("initdb")
        if initdb:
            candidates.append(Path(initdb).resolve().parent)
        candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
        candidates += [Path("/usr/local/pgsql/bin"), Path("/opt/homebrew/bin")]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory, str(directory)
    where = f"{ENV_BIN}={configured}" if configured else "PATH and /usr/lib/postgresql/*/bin"
    return None, where


def _as_postgres_user(command: list[str]) -> list[str] | str:
    """``command`` as it must be run by this process (a reason string if it cannot be)."""
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "running as root (initdb refuses) and there is no 'postgres' user to run it as"
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *command]
    su = shutil.which("su")
    if su:
        return [su, "postgres", "-s", "/bin/sh", "-c", shlex.join(command)]
    return "running as root (initdb refuses) and neither runuser nor su is available"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """``crash_safe``: a commit is durable against a crash of the server (``synchronous_commit``
    on; by default it is off, which loses the last commits when the postmaster is killed)."""

    def __init__(self, bin_dir: Path, *, crash_safe: bool = False) -> None:
        self.bin_dir = bin_dir
        self.crash_safe = crash_safe
        self.root = Path(tempfile.mkdtemp(prefix="turngate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port: int | None = None
        self._started = False

    def _run(self, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        wrapped = _as_postgres_user(command)
        if isinstance(wrapped, str):
            raise RuntimeError(wrapped)
        return subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> URL:
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o700)
        initdb = self._run(
            [
                *(str(self.bin_dir / "initdb"), "-D", str(self.data)),
                *("-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"),
            ]
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {(initdb.stderr or initdb.stdout).strip()[-500:]}")
        last_error = ""
        for _attempt in range(3):
            self.port = _free_port()
            last_error = self._pg_ctl_start()
            if not last_error:
                self._started = True
                atexit.register(self.stop)
                return make_url(f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres")
        raise RuntimeError(f"pg_ctl start failed: {last_error[-800:]}")

    def _pg_ctl_start(self) -> str:
        """Start the server on ``self.port``; "" when it runs, else why not."""
        # fsync off keeps commits across a process crash (the OS still holds the pages), not
        # synchronous_commit off (the WAL buffer dies with the server).
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c synchronous_commit={'on' if self.crash_safe else 'off'} "
            "-c full_page_writes=off -c max_connections=200"
        )
        started = self._run(
            [
                *(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log)),
                *("-w", "-t", "30", "-o", options, "start"),
            ]
        )
        if started.returncode == 0:
            return ""
        error = (started.stderr or started.stdout).strip()
        with contextlib.suppress(OSError):
            error += "\n" + self.log.read_text()[-800:]
        return error

    def crash(self) -> int:
        """SIGKILL the postmaster (its backends exit on their own); returns its pid."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        return pid

    def restart(self, timeout_s: float = 60) -> None:
        """Start again on the same port after :meth:`crash` (crash recovery runs first). Retried
        while the killed server's backends still hold its shared memory."""
        deadline = time.monotonic() + timeout_s
        while True:
            error = self._pg_ctl_start()
            if not error:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"pg_ctl start after a crash failed: {error[-800:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self._started:
            self._started = False
            with contextlib.suppress(Exception):
                self._run(
                    [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
                )
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- acquire


def acquire() -> PostgresServer | str:
    """A server for the tests, or the reason there is none (recorded in :data:`STATUS`)."""
    configured = os.environ.get(ENV_URL)
    url = normalize_url(configured or DEFAULT_URL)
    source = ENV_URL if configured else "the default address"
    unreachable = probe(url)
    if unreachable is None:
        server = PostgresServer(url, f"{safe(url)} ({source})")
        try:
            server.drop_database(server.create_database())
        except Exception as exc:
            return _skip(
                f"PostgreSQL tests skipped: the server at {safe(url)} does not let "
                f"{url.username or 'the user'} create databases ({exc}); grant CREATEDB or set {ENV_URL}"
            )
        STATUS.description = server.description
        return server

    bin_dir, where = find_binaries()
    if bin_dir is None:
        return _skip(
            f"PostgreSQL tests skipped: no server at {safe(url)} ({unreachable}) and no initdb/pg_ctl "
            f"(looked in {where}): install postgresql or set {ENV_URL}"
        )
    cluster = ThrowawayCluster(bin_dir)
    try:
        admin_url = cluster.start()
    except Exception as exc:
        cluster.stop()
        return _skip(
            f"PostgreSQL tests skipped: no server at {safe(url)} ({unreachable}) and a throwaway "
            f"cluster with {bin_dir}/initdb could not start: {exc}; set {ENV_URL}"
        )
    STATUS.description = (
        f"a throwaway cluster ({bin_dir}/initdb, port {cluster.port}) because nothing answered at {safe(url)}"
    )
    return PostgresServer(admin_url, STATUS.description, cluster)


def _skip(reason: str) -> str:
    STATUS.skip_reason = reason
    return reason
