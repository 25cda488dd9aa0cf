"""API keys, stored hashed in the ledger database (table ``api_keys``, migration 0003).

A secret is ``tgk_<key_id>_<43 url-safe chars>`` (256 random bits from :mod:`secrets`). Only its
sha256 is stored: a secret has enough entropy that a fast hash cannot be brute-forced, and a
lookup is one unique-index search. The secret is shown once, by ``turngate keys create``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, insert, select, update

from turngate.ledger.engine import (
    unavailable_on_db_errors,
)
from turngate.ledger.schema import api_keys
from turngate.security.principal import ALL_TENANTS, Principal, parse_roles

SECRET_PREFIX = "tgk_"
MAX_SECRET_CHARS = 200


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant_id: str
    roles: frozenset[str]
    name: str | None
    created_at: str
    revoked_at: str | None

    def as_dict(self) -> dict[str, object]:
        """For `turngate keys list --json`: everything but the (never stored) secret."""
        return {
            "key_id": self.key_id,
            "tenant_id": self.tenant_id,
            "roles": sorted(self.roles),
            "name": self.name,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }

    def principal(self) -> Principal:
        tenant = None if self.tenant_id == ALL_TENANTS else self.tenant_id
        return Principal(tenant_id=tenant, key_id=self.key_id, roles=self.roles)


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str


class KeyStore:
    """Create, list, revoke and look up keys over the ledger's engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(self, tenant_id: str, roles: str | frozenset[str], name: str | None = None) -> CreatedKey:
        tenant = tenant_id.strip()
        if not tenant:
            raise ValueError("a tenant is needed")
        role_set = parse_roles(roles) if isinstance(roles, str) else parse_roles(",".join(roles))
        key_id = secrets.token_hex(6)
        secret = f"{SECRET_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        key = ApiKey(key_id, tenant, role_set, name, _now(), None)
        with self._engine.begin() as conn:
            conn.execute(
                insert(api_keys).values(
                    key_id=key_id,
                    secret_sha256=hash_secret(secret),
                    tenant_id=tenant,
                    roles=",".join(sorted(role_set)),
                    name=name,
                    created_at=key.created_at,
                )
            )
        return CreatedKey(key, secret)

    def list(self) -> list[ApiKey]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at, api_keys.c.key_id))
            return [_key(row._mapping) for row in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key (effective for the next request). False if no such active key."""
        with self._engine.begin() as conn:
            result = conn.execute(
                update(api_keys)
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=_now())
            )
            return bool(result.rowcount)

    def lookup(self, secret: str) -> ApiKey | None:
        """The active key with this secret, or None (unknown, malformed or revoked)."""
        if not secret.startswith(SECRET_PREFIX) or len(secret) > MAX_SECRET_CHARS:
            return None
        with unavailable_on_db_errors("API key lookup"), self._engine.connect() as conn:
            row = conn.execute(
                select(api_keys).where(api_keys.c.secret_sha256 == hash_secret(secret))
            ).first()
        if row is None or row._mapping["revoked_at"] is not None:
            return None
        return _key(row._mapping)


def _key(row: object) -> ApiKey:
    values = dict(row)  # type: ignore[call-overload]
    return ApiKey(
        key_id=values["key_id"],
        tenant_id=values["tenant_id"],
        roles=frozenset(part for part in values["roles"].split(",") if part),
        name=values["name"],
        created_at=values["created_at"],
        revoked_at=values["revoked_at"],
    )
