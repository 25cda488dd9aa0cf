#!/bin/sh
# Runs once, when the postgres container initializes an empty data directory (as the superuser).
# Temporal gets a role that may create its two databases (temporal-schema does that); turngate
# gets a role that owns its database (`turngate setup` migrates as it) and turngate_app, the role
# the API and workers run as: `turngate setup --app-role turngate_app` grants it read and append
# only, so the application's credentials cannot rewrite history (docs/LEDGER.md, Permissions).
set -e
: "${TEMPORAL_DB_PASSWORD:?TEMPORAL_DB_PASSWORD is not set}"
: "${TURNGATE_DB_PASSWORD:?TURNGATE_DB_PASSWORD is not set}"
: "${TURNGATE_APP_DB_PASSWORD:?TURNGATE_APP_DB_PASSWORD is not set}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v temporal_password="$TEMPORAL_DB_PASSWORD" \
  -v turngate_password="$TURNGATE_DB_PASSWORD" \
  -v app_password="$TURNGATE_APP_DB_PASSWORD" <<'SQL'
CREATE ROLE temporal LOGIN CREATEDB PASSWORD :'temporal_password';
CREATE ROLE turngate LOGIN PASSWORD :'turngate_password';
CREATE ROLE turngate_app LOGIN PASSWORD :'app_password';
CREATE DATABASE turngate OWNER turngate;
REVOKE ALL ON DATABASE turngate FROM PUBLIC;
GRANT CONNECT ON DATABASE turngate TO turngate_app;
SQL
