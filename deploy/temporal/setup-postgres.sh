#!/bin/sh
# Creates Temporal's databases if they are missing and brings their schemas up to the version of
# this admin-tools image. Safe to run again: setup-schema and update-schema are idempotent.
# Environment: POSTGRES_SEEDS, DB_PORT, POSTGRES_USER, SQL_PASSWORD (read by temporal-sql-tool).
set -eu
SCHEMA_ROOT=/etc/temporal/schema/postgresql/v12

sql_tool() {
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" "$@"
}

echo "waiting for PostgreSQL at $POSTGRES_SEEDS:$DB_PORT"
until nc -z "$POSTGRES_SEEDS" "$DB_PORT"; do sleep 1; done

for database in temporal temporal_visibility; do
  # `create` fails when the database exists; a real failure shows up in the next command.
  sql_tool --db "$database" create || echo "database $database already exists"
done
sql_tool --db temporal setup-schema -v 0.0
sql_tool --db temporal update-schema -d "$SCHEMA_ROOT/temporal/versioned"
sql_tool --db temporal_visibility setup-schema -v 0.0
sql_tool --db temporal_visibility update-schema -d "$SCHEMA_ROOT/visibility/versioned"
echo "Temporal schemas are up to date"
