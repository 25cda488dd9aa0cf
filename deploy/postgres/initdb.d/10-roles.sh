#!/bin/sh
# Runs once, when the postgres container initializes an empty data directory (as the superuser).
# Temporal gets a role that may create its two databases (temporal-schema does that); turngate
# gets a role that owns its database, so the ledger migrates itself on first start.
# For a runtime role that cannot rewrite history, see docs/LEDGER.md "Permissions (PostgreSQL)".
set -e
: "${TEMPORAL_DB_PASSWORD:?TEMPORAL_DB_PASSWORD is not set}"
: "${TURNGATE_DB_PASSWORD:?TURNGATE_DB_PASSWORD is not set}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v temporal_password="$TEMPORAL_DB_PASSWORD" \
  -v turngate_password="$TURNGATE_DB_PASSWORD" <<'SQL'
CREATE ROLE temporal LOGIN CREATEDB PASSWORD :'temporal_password';
CREATE ROLE turngate LOGIN PASSWORD :'turngate_password';
CREATE DATABASE turngate OWNER turngate;
REVOKE ALL ON DATABASE turngate FROM PUBLIC;
SQL
