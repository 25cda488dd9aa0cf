"""Alembic environment for the turngate ledger.

The store runs migrations programmatically: it opens a connection, takes the database's write
lock (``BEGIN IMMEDIATE`` on SQLite, an advisory transaction lock on PostgreSQL) and passes the
connection in ``config.attributes["connection"]``. Alembic then runs inside that transaction,
so two processes opening the same ledger at once migrate one after the other and the second
finds the schema already at head.

Run by hand (``alembic -c src/turngate/ledger/alembic.ini upgrade head``) it builds an engine
with the store's connection settings from ``sqlalchemy.url`` / ``TURNGATE_LEDGER_URL``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from turngate.ledger.schema import in_schema_diff, metadata

config = context.config

if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        # the search table is built by hand per backend (see schema.thread_search)
        include_name=in_schema_diff,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # By hand: build the engine the store would build, and take the same migration lock.
    from turngate.ledger.engine import (
        create_ledger_engine,
        migration_lock,
    )

    url = os.environ.get("TURNGATE_LEDGER_URL") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url or TURNGATE_LEDGER_URL to migrate a ledger")
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as conn, migration_lock(conn):
            _run(conn)
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url") or "sqlite://",
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
