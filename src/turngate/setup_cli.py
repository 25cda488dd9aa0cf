"""`turngate setup`: the one-shot first step of a deployment, run with the ledger owner's
credentials before the API and workers start (idempotent; run it on every deploy):

1. migrate the ledger schema to head (the owner may; the application role may not);
2. ``--app-role``: grant the least-privileged application role what the API and workers need
   (PostgreSQL): read and append events, read and create API keys, revoke them (``revoked_at``
   only), read and record case records, read and add budget records, keep the thread summary
   that every append updates. No UPDATE of events, no DELETE anywhere, no DDL: that role cannot
   rewrite history;
3. ``--encryption-keys-file``: create the history encryption key file if it does not exist;
4. ``--admin-key-file``: while no active admin key exists, create one and write its secret to
   the file (owner-only), so the first ``turngate chat`` of a deployment has a key.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine

from turngate.encryption import ensure_key_file
from turngate.ledger import LedgerStore
from turngate.security.keys import KeyStore
from turngate.security.principal import ALL_TENANTS, ROLE_ADMIN, ROLE_INTENT_WRITE, ROLE_SNAPSHOT_READ
from turngate.settings import load_settings

_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: What the application role may do, table by table (PostgreSQL privileges).
APP_GRANTS: tuple[str, ...] = (
    # PostgreSQL before 15 lets every role create tables in public; nobody but the owner should.
    "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT ON events TO {role}",
    # The thread summary and counts are kept by every append, in the append's transaction.
    "GRANT SELECT, INSERT, UPDATE ON thread_summary, thread_actors, ledger_counts TO {role}",
    # A thread's first append adds its id to the search table (a trigger on thread_summary).
    "GRANT SELECT, INSERT ON thread_search TO {role}",
    "GRANT SELECT, INSERT ON api_keys TO {role}",
    "GRANT UPDATE (revoked_at) ON api_keys TO {role}",
    "GRANT SELECT, INSERT ON case_records TO {role}",
    "GRANT SELECT, INSERT ON budgets TO {role}",  # append-only: triggers refuse UPDATE and DELETE
    "GRANT SELECT ON alembic_version TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
)
BOOTSTRAP_ROLES = ",".join((ROLE_ADMIN, ROLE_INTENT_WRITE, ROLE_SNAPSHOT_READ))


def grant_app_role(engine: Engine, role: str) -> None:
    if engine.dialect.name != "postgresql":
        raise SystemExit("--app-role needs a PostgreSQL ledger")
    if not _ROLE_NAME.match(role):
        raise SystemExit(f"--app-role {role!r}: a lower-case PostgreSQL role name")
    with engine.begin() as conn:
        for statement in APP_GRANTS:
            conn.execute(text(statement.format(role=role)))


def bootstrap_admin_key(engine: Engine, path: Path) -> bool:
    """Create an admin key and write its secret to ``path`` unless an active admin key exists
    (then nothing changes: a deleted file does not mint a second admin). True when created."""
    keys = KeyStore(engine)
    if any(ROLE_ADMIN in key.roles and key.revoked_at is None for key in keys.list()):
        return False
    created = keys.create(ALL_TENANTS, BOOTSTRAP_ROLES, name="bootstrap admin")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(created.secret + "\n")
    return True


async def cmd_setup(args: argparse.Namespace) -> int:
    settings = load_settings()
    with LedgerStore(args.ledger_url or settings.effective_ledger_url) as store:  # migrates to head
        print("ledger: schema at head")
        if args.app_role:
            grant_app_role(store.engine, args.app_role)
            print(f"ledger: granted the application role {args.app_role} (read, append; no rewrite)")
        if args.encryption_keys_file:
            path = Path(args.encryption_keys_file)
            existed = path.exists()
            key_id = "k" + datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
            ensure_key_file(path, key_id)
            print(f"encryption keys: {'kept' if existed else 'created'} {path}")
        if args.admin_key_file:
            path = Path(args.admin_key_file)
            created = bootstrap_admin_key(store.engine, path)
            print(
                f"admin key: {'written to ' + str(path) if created else 'an admin key exists; none created'}"
            )
    return 0


def add_setup_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    setup = sub.add_parser(
        "setup",
        help="one-shot deploy step: migrate the ledger, grant the app role, bootstrap keys",
        description=(__doc__ or "").split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    setup.add_argument("--ledger-url", help="the owner's URL (default: TURNGATE_LEDGER_URL)")
    setup.add_argument("--app-role", help="PostgreSQL role the API and workers run as")
    setup.add_argument("--encryption-keys-file", help="create this key file when missing")
    setup.add_argument("--admin-key-file", help="write a first admin key's secret here")
    setup.set_defaults(run=cmd_setup)
