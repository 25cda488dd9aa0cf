"""The ledger's database engine: URLs, SQLite's pragmas and write lock, PostgreSQL's connect
arguments, migrations under a lock, and the one translation of "the database is not usable
right now" into :class:`~turngate.ledger.errors.LedgerUnavailableError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Engine,
    create_engine,
    event,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from turngate.ledger.errors import LedgerError, LedgerUnavailableError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
DEFAULT_BUSY_TIMEOUT_MS = 30_000
#: Key of the PostgreSQL advisory lock that serializes ledger writers and migrations.
PG_WRITE_LOCK_KEY = 0x7475726E67617465 & 0x7FFFFFFFFFFFFFFF  # "turngate"
#: URL schemes that mean PostgreSQL through psycopg 3 (the only PostgreSQL driver installed).
PG_SCHEMES = frozenset({"postgresql", "postgresql+psycopg", "postgres"})
WRITE_OPTION = "turngate_write"
#: Default seconds one ledger round trip may take (TURNGATE_LEDGER_TIMEOUT_S; PostgreSQL: the
#: bounds in ``ledger/pg_bounds.py``, imported only for a PostgreSQL ledger, so a SQLite one never
#: loads psycopg, about 10 MB per process).
DEFAULT_LEDGER_TIMEOUT_S = 30.0
#: Execution option of a read that is one statement: SQLite runs it in its own implicit
#: transaction, as consistent as an explicit one, so no BEGIN is sent for it.
ONE_STATEMENT_OPTION = "turngate_one_statement"


# --------------------------------------------------------------------------- engine


def _sqlite_on_connect(busy_timeout_ms: int, memory: bool) -> Any:
    """SQLite only: connection pragmas, and hand BEGIN over to :func:`_sqlite_on_begin`."""

    def on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # The sqlite3 driver's legacy transaction control does not BEGIN before SELECT or DDL;
        # switch it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if not memory:
                _enable_wal(cursor, busy_timeout_ms)
            # FULL: a commit is fsynced before it is acknowledged (in WAL mode NORMAL could
            # lose the last commits on power loss).
            cursor.execute("PRAGMA synchronous = FULL")
        finally:
            cursor.close()

    return on_connect


def _enable_wal(cursor: Any, busy_timeout_ms: int) -> None:
    """SQLite only: switch the database file to WAL (persistent; a no-op once it is WAL)."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        cursor.execute("PRAGMA journal_mode")
        if str(cursor.fetchone()[0]).lower() == "wal":
            return
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            if str(cursor.fetchone()[0]).lower() == "wal":
                return
        except Exception as exc:  # sqlite3.OperationalError: database is locked
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise LedgerUnavailableError("could not switch the SQLite ledger to WAL mode")
        time.sleep(0.01)


def _sqlite_on_begin(conn: Connection) -> None:
    """SQLite only: writers take the write lock up front, readers get a snapshot (a lone
    statement has one without a BEGIN)."""
    options = conn.get_execution_options()
    if options.get(ONE_STATEMENT_OPTION) and not options.get(WRITE_OPTION):
        return
    mode = "IMMEDIATE" if options.get(WRITE_OPTION) else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def normalize_url(url: str | URL) -> URL:
    """The ledger URL as SQLAlchemy will open it; unsupported backends and drivers are refused.

    ``postgresql://`` and ``postgres://`` mean psycopg 3 (``postgresql+psycopg://``).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.get_driver_name() != "pysqlite":
            raise LedgerError(f"unsupported SQLite driver {parsed.get_driver_name()!r}; use sqlite://")
        return parsed
    if parsed.drivername in PG_SCHEMES:
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "postgresql":
        raise LedgerError(
            f"unsupported PostgreSQL driver {parsed.get_driver_name()!r}; use postgresql+psycopg://"
        )
    raise LedgerError(
        f"unsupported ledger backend {parsed.get_backend_name()!r}; use sqlite:// or postgresql+psycopg://"
    )


def is_sqlite_memory(url: str | URL) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def postgres_connect_args(
    url: URL, *, busy_timeout_ms: int, timeout_s: float = DEFAULT_LEDGER_TIMEOUT_S
) -> dict[str, Any]:
    """PostgreSQL only: psycopg connection parameters added to the ones in the URL.

    ``lock_timeout`` plays the role of SQLite's ``busy_timeout``: a writer that cannot get the
    ledger's write lock (or a table lock) in time fails with :class:`LedgerUnavailableError`.
    ``timeout_s`` bounds connecting, the server's statements and idle transactions, and the TCP
    link (``ledger/pg_bounds.py``). Settings already in the URL (``?connect_timeout=``,
    ``?application_name=``, ``?keepalives=``..., an ``options`` that sets ``lock_timeout`` or
    ``statement_timeout``) win.
    """
    from turngate.ledger.pg_bounds import bound_options

    query = {key: value if isinstance(value, str) else value[-1] for key, value in url.query.items()}
    bounds = bound_options(timeout_s)
    args: dict[str, Any] = {}
    options = query.get("options", "")
    if "lock_timeout" not in options:
        options = f"{options} -c lock_timeout={int(busy_timeout_ms)}".strip()
    statement = bounds.pop("statement")
    if "statement_timeout" not in options:
        options = f"{options} {statement}".strip()
    if options != query.get("options", ""):
        args["options"] = options
    for name, value in bounds.items():
        if name not in query:
            args[name] = value
    if "application_name" not in query:
        args["application_name"] = "turngate-ledger"
    return args


def create_ledger_engine(
    url: str | URL,
    *,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    timeout_s: float = DEFAULT_LEDGER_TIMEOUT_S,
) -> Engine:
    """An engine configured for the ledger (pragmas and BEGIN handling on SQLite; on PostgreSQL
    every round trip bounded by ``timeout_s``)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "postgresql":
        # --- PostgreSQL only ---------------------------------------------------------------
        from turngate.ledger.pg_bounds import bounded_connect

        # READ COMMITTED (the default) for writers; readers ask for REPEATABLE READ per
        # connection (LedgerStore._read_engine).
        engine = create_engine(
            parsed,
            pool_pre_ping=True,
            connect_args=postgres_connect_args(parsed, busy_timeout_ms=busy_timeout_ms, timeout_s=timeout_s),
        )
        event.listen(engine, "do_connect", bounded_connect(timeout_s))
        return engine
    # --- SQLite only ---------------------------------------------------------------------
    memory = is_sqlite_memory(parsed)
    if memory:
        engine = create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        database = parsed.database or ""
        if not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # Connections are cheap; many API/activity threads read at once (writers queue on the
        # process-local lock and hold one connection).
        engine = create_engine(
            parsed,
            pool_size=8,
            max_overflow=32,
            connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
        )
    event.listen(engine, "connect", _sqlite_on_connect(busy_timeout_ms, memory))
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


@contextmanager
def migration_lock(conn: Connection) -> Iterator[Connection]:
    """Run the body in a transaction that holds the ledger's write lock (see module doc)."""
    conn.execution_options(**{WRITE_OPTION: True})
    with conn.begin():
        if conn.dialect.name == "postgresql":
            # --- PostgreSQL only: one writer/migrator at a time, released at commit -------
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_WRITE_LOCK_KEY})
        yield conn


def migrate(conn: Connection, revision: str = "head", *, downgrade: bool = False) -> None:
    """Upgrade (or downgrade) the ledger schema to ``revision`` inside ``conn``'s (locked)
    transaction. Downgrades are for tools and tests (a migration's backfill on an old ledger)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["connection"] = conn
    current = set(MigrationContext.configure(conn).get_current_heads())
    wanted = set(ScriptDirectory.from_config(config).get_heads()) if revision == "head" else {revision}
    # A schema change (a backfill of a large ledger) may rightly run longer than one round trip's
    # bound; the usual start, with nothing to do, keeps it.
    with _unbounded(conn) if downgrade or current != wanted else nullcontext():
        (command.downgrade if downgrade else command.upgrade)(config, revision)


def _unbounded(conn: Connection) -> AbstractContextManager[None]:
    if conn.dialect.name != "postgresql":
        return nullcontext()
    from turngate.ledger.pg_bounds import unbounded

    return unbounded(conn)


@contextmanager
def unavailable_on_db_errors(action: str) -> Iterator[None]:
    """Translate "the database is not usable right now" into :class:`LedgerUnavailableError`.

    Locked / unreachable / unopenable / not-a-database errors and pool timeouts qualify;
    constraint violations and SQL errors (bugs) pass through unchanged.
    """
    try:
        yield
    except (
        sa_exc.IntegrityError,
        sa_exc.ProgrammingError,
        sa_exc.DataError,
        sa_exc.NotSupportedError,
    ):
        raise
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DatabaseError) as exc:
        raise LedgerUnavailableError(f"ledger {action} failed: {exc.orig}") from exc
    except sa_exc.TimeoutError as exc:
        raise LedgerUnavailableError(f"ledger {action} failed: {exc}") from exc
