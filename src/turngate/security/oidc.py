"""Optional OIDC/JWT bearer tokens, validated with PyJWT against a configured issuer and JWKS.

Off unless ``TURNGATE_OIDC_ISSUER`` and ``TURNGATE_OIDC_JWKS`` are set. A token is accepted only
when its signature verifies with a key of the JWKS (a file, or an https URL fetched and cached),
its ``alg`` is one of ``TURNGATE_OIDC_ALGORITHMS`` (asymmetric only: never ``none`` or HMAC),
``iss`` matches, ``aud`` contains ``TURNGATE_OIDC_AUDIENCE`` when set, and ``exp`` is in the
future (``nbf``/``iat`` honoured, 30 s leeway). Roles come from the ``TURNGATE_OIDC_ROLES_CLAIM``
claim (a list or a space-separated string; unknown roles ignored, none at all is refused), the
tenant from ``TURNGATE_OIDC_TENANT_CLAIM`` (a token without one is refused unless it grants
``admin``, which makes it unscoped; one with white space around it, a control character, over
200 characters or ``*`` is refused: :func:`tenant_claim_problem`). The principal's ``key_id``
is ``oidc:<sub>``: what rate limits count against and what an INTENT records; the token itself
is never stored or logged.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from turngate.core.events import MAX_ID_CHARS
from turngate.security.principal import ALL_TENANTS, ROLE_ADMIN, ROLES, Principal

if TYPE_CHECKING:  # PyJWT (~20 MB) is imported only when OIDC is configured
    import jwt

#: Asymmetric algorithms only: an HMAC secret would have to be shared with every client.
DEFAULT_ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
LEEWAY_S = 30


class OidcError(Exception):
    """The token is not acceptable; ``detail`` says why without echoing the token."""


class OidcConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    issuer: str
    jwks: str  # a file path or an http(s) URL
    audience: str | None = None
    tenant_claim: str = "tenant_id"
    roles_claim: str = "roles"
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OidcConfig | None:
        issuer, jwks = env.get("TURNGATE_OIDC_ISSUER"), env.get("TURNGATE_OIDC_JWKS")
        if not issuer or not jwks:
            return None
        values: dict[str, object] = {
            "issuer": issuer,
            "jwks": jwks,
            "audience": env.get("TURNGATE_OIDC_AUDIENCE"),
        }
        for name, field in (
            ("TURNGATE_OIDC_TENANT_CLAIM", "tenant_claim"),
            ("TURNGATE_OIDC_ROLES_CLAIM", "roles_claim"),
        ):
            if env.get(name):
                values[field] = env[name]
        if env.get("TURNGATE_OIDC_ALGORITHMS"):
            algorithms = tuple(a.strip() for a in env["TURNGATE_OIDC_ALGORITHMS"].split(",") if a.strip())
            weak = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
            if weak:
                raise ValueError(f"TURNGATE_OIDC_ALGORITHMS: {', '.join(weak)} not allowed (asymmetric only)")
            values["algorithms"] = algorithms
        return cls(**values)


class OidcVerifier:
    """Validates tokens; blocking (a JWKS URL may be fetched): call it from a worker thread."""

    def __init__(self, config: OidcConfig) -> None:
        import jwt

        self.config = config
        if config.jwks.startswith(("https://", "http://")):
            self._client: jwt.PyJWKClient | None = jwt.PyJWKClient(
                config.jwks, cache_keys=True, lifespan=300, timeout=5
            )
            self._keys: jwt.PyJWKSet | None = None
        else:
            self._client = None
            self._keys = jwt.PyJWKSet.from_json(Path(config.jwks).read_text(encoding="utf-8"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OidcVerifier | None:
        config = OidcConfig.from_env(os.environ if env is None else env)
        return cls(config) if config is not None else None

    def principal(self, token: str) -> Principal:
        import jwt

        cfg = self.config
        try:
            key = self._signing_key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=list(cfg.algorithms),
                issuer=cfg.issuer,
                audience=cfg.audience,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "sub"], "verify_aud": cfg.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise OidcError(f"invalid token: {type(exc).__name__}: {exc}") from exc
        roles = _roles(claims.get(cfg.roles_claim))
        if not roles:
            raise OidcError(f"the token grants no turngate role in claim {cfg.roles_claim!r}")
        tenant = claims.get(cfg.tenant_claim)
        problem = None if tenant is None else tenant_claim_problem(tenant)
        if problem is not None:
            raise OidcError(f"claim {cfg.tenant_claim!r} {problem}")
        if tenant is None and ROLE_ADMIN not in roles:
            raise OidcError(
                f"the token has no {cfg.tenant_claim!r} claim (only admin tokens may be unscoped)"
            )
        return Principal(tenant_id=tenant, key_id=f"oidc:{claims['sub']}", roles=roles)

    def _signing_key(self, token: str) -> jwt.PyJWK:
        import jwt

        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token)
        kid = jwt.get_unverified_header(token).get("kid")
        assert self._keys is not None
        keys = [k for k in self._keys.keys if kid is None or k.key_id == kid]
        if not keys:
            raise jwt.InvalidKeyError(f"no key with kid {kid!r} in the JWKS")
        return keys[0]


def tenant_claim_problem(value: object) -> str | None:
    """Why ``value`` cannot name a tenant, or None. Tenants match exactly, so a claim is taken as
    it is or refused, never trimmed or cleaned: ``" bob"`` is not quietly ``bob`` (a claim a user
    may edit at the identity provider would otherwise reach another tenant's data and budgets),
    nor a tenant of its own outside bob's budgets."""
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    if value != value.strip():
        return "has white space around it (tenants match exactly: fix the claim at the identity provider)"
    if any(unicodedata.category(char) == "Cc" for char in value):
        return "holds a control character"
    if len(value) > MAX_ID_CHARS:
        return f"is longer than {MAX_ID_CHARS} characters"
    if value == ALL_TENANTS:
        return f"is {ALL_TENANTS!r}, which names no tenant (an unscoped token: admin, without the claim)"
    return None


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: a JWT, not an API key (``tgk_...``)."""
    return token.count(".") == 2 and not token.startswith("tgk_")


def _roles(value: object) -> frozenset[str]:
    if isinstance(value, str):
        names = value.split()
    elif isinstance(value, list):
        names = [v for v in value if isinstance(v, str)]
    else:
        return frozenset()
    return frozenset(names) & ROLES
