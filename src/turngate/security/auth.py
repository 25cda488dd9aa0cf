"""The FastAPI dependency that guards every API route: authenticate, authorize, rate-limit.

Installed once on the app (``FastAPI(dependencies=[...])``), so it runs for every API route,
including routes added later; the role comes from :mod:`turngate.security.routes`. It sets
``request.state.principal`` and ``request.state.tenant_id`` (None: unscoped) for route code.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Annotated, Literal

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from turngate.security.key_cache import KeyCache
from turngate.security.keys import KeyStore
from turngate.security.oidc import OidcError, OidcVerifier, looks_like_jwt
from turngate.security.principal import DEV_PRINCIPAL, ROLE_ADMIN, Principal, keyless_reader
from turngate.security.ratelimit import RateLimiter, retry_after_header
from turngate.security.routes import (
    API_KEY_HEADER_ROUTES,
    AUTHENTICATED,
    KEYLESS_READ_ROUTES,
    OPERATOR,
    PUBLIC,
    required_role,
)

log = logging.getLogger(__name__)

#: Documents the scheme in OpenAPI; the header itself is parsed below (auto_error off).
bearer_scheme = HTTPBearer(auto_error=False, description="an API key from `turngate keys create`")


class AuthError(Exception):
    """Refused at the boundary; rendered as ``{ok: false, reason_code, detail}``."""

    def __init__(
        self, status: int, reason_code: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.status = status
        self.reason_code = reason_code
        self.detail = detail
        self.headers = headers or {}


class Authenticator:
    """Held in ``app.state.auth`` (created in the lifespan, with the ledger's engine)."""

    def __init__(
        self,
        keys: KeyStore,
        mode: str,
        limiter: RateLimiter,
        oidc: OidcVerifier | Literal["from_env"] | None = "from_env",
        key_cache_s: float = 0.0,
        keyless_read: bool = False,
        keyless_read_tenant: str | None = None,
    ) -> None:
        self.keys = keys
        # Active keys are remembered for key_cache_s: revocation takes effect within that bound.
        self.key_cache = KeyCache(keys, key_cache_s)
        self.mode = mode
        self.limiter = limiter
        # OIDC/JWT tokens are accepted besides API keys when TURNGATE_OIDC_* is configured.
        self.oidc = OidcVerifier.from_env() if oidc == "from_env" else oidc
        # Opt-in: GETs of KEYLESS_READ_ROUTES without credentials read as this tenant (None: all).
        self.keyless_read = keyless_read
        self.keyless_read_tenant = keyless_read_tenant

    def keyless(self, request: Request, path: str) -> Principal | None:
        """The keyless reader for a request without credentials, when the keyless read-only mode
        is on and this is a GET of one of its routes; else None (the route's 401 stands)."""
        if not self.keyless_read or request.method != "GET" or path not in KEYLESS_READ_ROUTES:
            return None
        return keyless_reader(self.keyless_read_tenant, request.client.host if request.client else "unknown")

    async def principal(self, request: Request) -> Principal | None:
        """The caller, or None when no credentials came (the route decides if that is fine)."""
        header = request.headers.get("authorization")
        api_key = request.headers.get("x-api-key")
        if header is None and api_key is not None and _route_path(request) in API_KEY_HEADER_ROUTES:
            header = f"Bearer {api_key}"  # Anthropic's SDK sends its key so
        if header is None:
            if self.mode == "dev" and _is_loopback(request):
                return DEV_PRINCIPAL
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _invalid("the Authorization header must be `Bearer <key>`")
        if self.oidc is not None and looks_like_jwt(token):
            try:
                return await asyncio.to_thread(self.oidc.principal, token)
            except OidcError as exc:
                raise _invalid(str(exc)) from None
        key = self.key_cache.cached(token) or await asyncio.to_thread(self.key_cache.lookup, token)
        if key is None:
            raise _invalid("unknown or revoked API key")
        return key.principal()

    async def check_rate(self, principal: Principal) -> None:
        limited_as = principal.key_id or principal.limit_id
        if limited_as is None:
            return  # dev mode without a key: local use, not limited
        # A shared (Redis) limiter answers from a worker thread; the in-memory one right here.
        wait = await self.limiter.acquire_async(limited_as)
        if wait > 0:
            raise AuthError(
                429,
                "rate.limited",
                f"rate limit of {self.limiter.rate:g} requests/s (burst {self.limiter.burst}) "
                "exceeded for this key; retry after Retry-After seconds",
                {"Retry-After": retry_after_header(wait)},
            )


def _invalid(detail: str) -> AuthError:
    return AuthError(401, "auth.invalid", detail, {"WWW-Authenticate": 'Bearer error="invalid_token"'})


def _route_path(request: Request) -> str:
    return str(getattr(request.scope.get("route"), "path", request.url.path))


def _is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def authorize(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> None:
    """The app-wide dependency: 401 ``auth.missing`` / ``auth.invalid``, 403 ``auth.forbidden``,
    429 ``rate.limited``; sets ``request.state.principal`` / ``tenant_id`` when it lets a request in."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    role = required_role(path, request.method)
    auth: Authenticator = request.app.state.auth
    if role == PUBLIC:
        principal = None
        if request.headers.get("authorization") is not None:
            principal = await auth.principal(request)  # a bad key is refused even here
    else:
        principal = await auth.principal(request) or auth.keyless(request, path)
        if principal is None:
            raise AuthError(
                401,
                "auth.missing",
                "this route needs `Authorization: Bearer <key>`",
                {"WWW-Authenticate": "Bearer"},
            )
        if role == OPERATOR:
            if not principal.may(ROLE_ADMIN) or principal.tenant_id is not None:
                detail = "this route is for operators: the admin role with no tenant (tenant '*')"
                raise AuthError(403, "auth.forbidden", detail)
        elif role != AUTHENTICATED and not principal.may(role):
            raise AuthError(403, "auth.forbidden", f"this route needs the {role!r} role")
        await auth.check_rate(principal)
    request.state.principal = principal
    request.state.tenant_id = principal.tenant_id if principal else None


def request_principal(request: Request) -> Principal:
    """The principal :func:`authorize` admitted. Fails closed: a route reached without it (the
    dependency not installed, a public route) is refused, never treated as unscoped."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None and not hasattr(request.app.state, "auth"):
        # A router mounted in a bare FastAPI app (unit tests of one router): no gateway, no keys.
        return DEV_PRINCIPAL
    if principal is None:
        raise AuthError(401, "auth.missing", "this route needs `Authorization: Bearer <key>`")
    return principal
