"""PostgreSQL only: no ledger call waits on a silent network for longer than a bound.

A partition between a process and its database does not fail a connection: packets stop, the
socket stays open, and a thread blocked reading it waits forever (a worker has a few such
threads; losing them all stops every turn). Three bounds together make every round trip end:

- the client's own: :class:`BoundedConnection` gives every psycopg round trip (statement,
  fetch, commit, rollback) a deadline; past it the connection is closed and the call fails with
  ``OperationalError``, which the ledger reports as ``LedgerUnavailableError`` (a retried step);
- the server's: ``statement_timeout`` and ``idle_in_transaction_session_timeout``, so a session
  whose client went silent mid-transaction ends and its locks (the ledger's write lock among
  them) go to the next writer instead of waiting for a client that may never come back;
- the kernel's, on a real network: ``tcp_user_timeout`` and TCP keepalives drop a connection
  whose packets go unacknowledged.

Connecting is bounded by libpq's ``connect_timeout``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from sqlalchemy import text
from sqlalchemy.engine import Connection

#: libpq refuses a connect_timeout under 2 s.
MIN_CONNECT_TIMEOUT_S = 2
#: psycopg's own poll interval (how often a blocked wait checks for Ctrl-C).
WAIT_INTERVAL_S = 0.1


class LedgerRoundTripTimeout(psycopg.OperationalError):
    """The database did not answer one round trip within the bound; the connection is closed."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every round trip ends within ``round_trip_timeout_s``."""

    round_trip_timeout_s: float | None = None

    def wait(self, gen: Any, interval: float = WAIT_INTERVAL_S, timeout: float | None = None) -> Any:
        bound = self.round_trip_timeout_s if timeout is None else timeout
        try:
            return super().wait(gen, interval, bound)
        except pg_errors._WaitTimeout:
            if timeout is not None:  # psycopg's own deadline (a cancel): its handling stands
                raise
            # The protocol state is unknown mid-round-trip: the connection cannot be reused.
            self.pgconn.finish()
            raise LedgerRoundTripTimeout(
                f"the ledger database did not answer within {bound:g} s (TURNGATE_LEDGER_TIMEOUT_S); "
                "connection closed"
            ) from None


def bounded_connect(timeout_s: float) -> Any:
    """A SQLAlchemy ``do_connect`` listener that opens :class:`BoundedConnection` s."""

    def do_connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> BoundedConnection:
        conn = BoundedConnection.connect(*cargs, **cparams)
        conn.round_trip_timeout_s = timeout_s
        return conn

    return do_connect


def bound_options(timeout_s: float) -> dict[str, Any]:
    """libpq parameters bounding connect, the server's side of a session, and the TCP link."""
    ms = int(timeout_s * 1000)
    return {
        "connect_timeout": max(MIN_CONNECT_TIMEOUT_S, math.ceil(timeout_s)),
        "statement": f"-c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}",
        "tcp_user_timeout": ms,
        "keepalives": 1,
        "keepalives_idle": max(1, math.ceil(timeout_s / 3)),
        "keepalives_interval": max(1, math.ceil(timeout_s / 9)),
        "keepalives_count": 3,
    }


@contextmanager
def unbounded(conn: Connection) -> Iterator[None]:
    """PostgreSQL only: no round-trip bound for the rest of ``conn``'s transaction (a schema
    migration); the server's statement_timeout is lifted for the transaction only."""
    if conn.dialect.name != "postgresql":
        yield
        return
    conn.execute(text("SET LOCAL statement_timeout = 0"))
    dbapi = conn.connection.dbapi_connection
    if not isinstance(dbapi, BoundedConnection):
        yield
        return
    previous, dbapi.round_trip_timeout_s = dbapi.round_trip_timeout_s, None
    try:
        yield
    finally:
        dbapi.round_trip_timeout_s = previous
