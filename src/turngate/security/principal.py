"""Who is calling: the principal an authenticated request carries, and the roles it may hold."""

from __future__ import annotations

from dataclasses import dataclass

ROLE_INTENT_WRITE = "intent.write"
ROLE_SNAPSHOT_READ = "snapshot.read"
ROLE_ADMIN = "admin"
ROLES: frozenset[str] = frozenset({ROLE_INTENT_WRITE, ROLE_SNAPSHOT_READ, ROLE_ADMIN})

#: A key created for this tenant is unscoped: it sees every tenant (operators).
ALL_TENANTS = "*"


@dataclass(frozen=True)
class Principal:
    """``tenant_id`` None: unscoped (an operator key with tenant ``*``, or dev mode without a key).

    ``key_id`` None: no key (dev mode, or a keyless read). Never holds the secret.
    ``limit_id``: what a request without a key is rate- and stream-limited as (keyless reads:
    ``keyless:<client address>``); None: dev mode, not limited.
    """

    tenant_id: str | None
    key_id: str | None
    roles: frozenset[str]
    limit_id: str | None = None

    def may(self, role: str) -> bool:
        return ROLE_ADMIN in self.roles or role in self.roles

    @property
    def limit_key(self) -> str:
        """What rate and stream limits count against."""
        return self.key_id or self.limit_id or "dev"


DEV_PRINCIPAL = Principal(tenant_id=None, key_id=None, roles=frozenset({ROLE_ADMIN}))


def keyless_reader(tenant_id: str | None, client: str) -> Principal:
    """A request without credentials admitted by the keyless read-only mode: may read the
    ledger (``snapshot.read``) of ``tenant_id`` (None: every tenant), limited per client address."""
    return Principal(
        tenant_id=tenant_id, key_id=None, roles=frozenset({ROLE_SNAPSHOT_READ}), limit_id=f"keyless:{client}"
    )


def parse_roles(text: str) -> frozenset[str]:
    """``intent.write,snapshot.read`` -> the roles; unknown or no roles raise ValueError."""
    roles = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(roles - ROLES)
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(sorted(ROLES))}")
    if not roles:
        raise ValueError("at least one role is needed")
    return roles
