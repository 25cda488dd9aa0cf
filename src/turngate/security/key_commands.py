"""`turngate keys create | list | revoke`: API keys in the ledger database."""

from __future__ import annotations

import argparse
import json
import sys

from turngate.ledger import LedgerStore
from turngate.security.keys import ApiKey, KeyStore
from turngate.security.principal import ALL_TENANTS, ROLES
from turngate.settings import load_settings


def _open(args: argparse.Namespace) -> LedgerStore:
    return LedgerStore(args.ledger_url or load_settings().effective_ledger_url)


def _line(key: ApiKey) -> str:
    state = f"revoked {key.revoked_at}" if key.revoked_at else "active"
    name = f" name={key.name}" if key.name else ""
    return f"{key.key_id}  tenant={key.tenant_id}  roles={','.join(sorted(key.roles))}{name}  {state}"


async def cmd_keys_create(args: argparse.Namespace) -> int:
    with _open(args) as store:
        try:
            created = KeyStore(store.engine).create(args.tenant, args.roles, args.name)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({**created.key.as_dict(), "secret": created.secret}, indent=2))
    else:
        print(_line(created.key))
        print(f"secret (shown once, store it now): {created.secret}")
    return 0


async def cmd_keys_list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        keys = KeyStore(store.engine).list()
    if args.json:
        print(json.dumps([key.as_dict() for key in keys], indent=2))
    else:
        print("\n".join(_line(key) for key in keys) if keys else "no keys")
    return 0


async def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with _open(args) as store:
        revoked = KeyStore(store.engine).revoke(args.key_id)
    if args.json:
        print(json.dumps({"key_id": args.key_id, "revoked": revoked}))
    else:
        print(f"revoked {args.key_id}" if revoked else f"no active key {args.key_id}", file=sys.stdout)
    return 0 if revoked else 1


def add_keys_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="create, list and revoke API keys (stored hashed in the ledger db)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    create = keys_sub.add_parser("create", help="create a key and print its secret once")
    create.add_argument("--tenant", required=True, help=f"the key's tenant ('{ALL_TENANTS}': every tenant)")
    create.add_argument("--roles", required=True, help=f"comma-separated, of {', '.join(sorted(ROLES))}")
    create.add_argument("--name", help="a label for people (never a secret)")
    create.set_defaults(run=cmd_keys_create)

    listing = keys_sub.add_parser("list", help="list keys (ids, tenants, roles; never secrets)")
    listing.set_defaults(run=cmd_keys_list)

    revoke = keys_sub.add_parser("revoke", help="revoke a key (refused from the next request on)")
    revoke.add_argument("key_id")
    revoke.set_defaults(run=cmd_keys_revoke)

    for parser in (create, listing, revoke):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument("--ledger-url", help="default: the configured ledger (TURNGATE_LEDGER_URL)")
