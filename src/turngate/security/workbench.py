"""Guarded fetch of ``artifact.handle`` content from a Workbench resolver (the gateway model).

Off by default. Every refusal or failure is a :class:`FetchOutcome` with a documented
``reason_code`` (never an exception, never a silent drop), so the caller can record it in the
manifest and the DECISION. Guardrails, in the order they apply:

1. ``ALLOW_HANDLE_CONTENT_FETCH`` must be true            -> ``workbench.disabled``
2. the handle's kind is in ``WORKBENCH_ADMIT_KINDS``       -> ``workbench.kind_not_admitted``
3. the resolver URL is http/https with a host and a valid port -> ``workbench.bad_url``
   and the handle id is not ``.`` or ``..`` (a path step)       -> ``workbench.bad_handle``
4. every address the host resolves to is outside the deny-list (link-local, cloud metadata,
   loopback, private, unspecified, multicast by default; ``WORKBENCH_DENY_NETWORKS`` replaces
   it), checked before connecting and again for every redirect hop, with the IPv4 address
   inside an IPv4-mapped, -compatible, 6to4, NAT64 or Teredo IPv6 address checked too; plain
   http connects to the checked address (no second DNS lookup)   -> ``workbench.denied_address``
   (a name that does not resolve                                    -> ``workbench.connection``)
5. redirects only to a usable URL of the same scheme, host and port, at most 3
                                                                   -> ``workbench.redirect_refused``
6. HTTP status 200                                                 -> ``workbench.http_error``
7. ``Content-Type: text/plain`` (any charset)                      -> ``workbench.content_type``
8. at most ``WORKBENCH_MAX_BYTES``, enforced while streaming       -> ``workbench.too_large``
9. the whole fetch within ``WORKBENCH_FETCH_TIMEOUT_MS``           -> ``workbench.timeout``
   (and ``workbench.connection`` when the resolver cannot be reached)

The bearer token (``WORKBENCH_AUTH_BEARER_TOKEN``) goes only into the request header: never into
an outcome, a URL, a log record or an error detail.

Resolver contract assumed: ``GET {WORKBENCH_RESOLVER_URL}/{handle_id}`` answers the content.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

from turngate.settings import Settings

#: Never fetched from unless WORKBENCH_DENY_NETWORKS says otherwise: cloud metadata, link-local,
#: loopback and private ranges (a resolver on an internal network is allowed by listing the
#: ranges to keep denied without its own).
DEFAULT_DENY_NETWORKS: tuple[str, ...] = (
    "169.254.0.0/16",  # IPv4 link-local, incl. the cloud metadata address 169.254.169.254
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "0.0.0.0/8",  # "this network"
    "::/128",  # unspecified
    "224.0.0.0/4",  # multicast
    "ff00::/8",  # IPv6 multicast
    "127.0.0.0/8",  # loopback: the gateway's own services
    "::1/128",  # IPv6 loopback
    "10.0.0.0/8",  # private (RFC 1918)
    "172.16.0.0/12",  # private (RFC 1918)
    "192.168.0.0/16",  # private (RFC 1918)
    "100.64.0.0/10",  # carrier-grade NAT, shared address space
    "fc00::/7",  # IPv6 unique local
)
MAX_REDIRECTS = 3
#: Handle ids that a URL would read as a path step (the resolver's base path or its parent).
DOT_SEGMENTS = frozenset({"", ".", ".."})
_TRUE = {"1", "true", "yes", "on"}


class WorkbenchConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    enabled: bool = False
    resolver_url: str | None = None
    bearer_token: SecretStr | None = None
    timeout_ms: int = 3000
    max_bytes: int = 64 * 1024
    admit_kinds: tuple[str, ...] = ()
    deny_networks: tuple[str, ...] = DEFAULT_DENY_NETWORKS

    @field_validator("deny_networks")
    @classmethod
    def _networks(cls, networks: tuple[str, ...]) -> tuple[str, ...]:
        # Checked once at start-up: a bad entry would otherwise raise inside every fetch.
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"WORKBENCH_DENY_NETWORKS: {network!r} is not a CIDR network") from None
        return networks

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkbenchConfig:
        """ALLOW_HANDLE_CONTENT_FETCH, WORKBENCH_* (WORKBENCH_DENY_NETWORKS: CIDRs, comma-separated)."""

        def csv(name: str) -> tuple[str, ...] | None:
            raw = env.get(name)
            return None if raw is None else tuple(p.strip() for p in raw.split(",") if p.strip())

        values: dict[str, Any] = {
            "enabled": env.get("ALLOW_HANDLE_CONTENT_FETCH", "").strip().lower() in _TRUE,
            "resolver_url": env.get("WORKBENCH_RESOLVER_URL") or None,
            "bearer_token": env.get("WORKBENCH_AUTH_BEARER_TOKEN") or None,
        }
        if env.get("WORKBENCH_FETCH_TIMEOUT_MS"):
            values["timeout_ms"] = int(env["WORKBENCH_FETCH_TIMEOUT_MS"])
        if env.get("WORKBENCH_MAX_BYTES"):
            values["max_bytes"] = int(env["WORKBENCH_MAX_BYTES"])
        if (kinds := csv("WORKBENCH_ADMIT_KINDS")) is not None:
            values["admit_kinds"] = kinds
        if (networks := csv("WORKBENCH_DENY_NETWORKS")) is not None:
            values["deny_networks"] = networks
        return cls(**values)


class FetchOutcome(BaseModel):
    """What happened; ``content`` only when ``ok``. Holds no token."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    reason_code: str
    detail: str
    handle_id: str
    kind: str
    content: bytes | None = None
    media_type: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None


class _Refused(Exception):
    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(detail)
        self.reason_code = reason_code
        self.detail = detail


Resolver = Any  # (host, port) -> list of address strings; injectable for tests


def _resolve(host: str, port: int) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: NAT64 prefixes whose last 32 bits are an IPv4 address (RFC 6052 well-known, RFC 8215 local).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def address_forms(ip: IPAddress) -> list[IPAddress]:
    """``ip`` and every IPv4 address an IPv6 address carries: IPv4-mapped (``::ffff:a.b.c.d``),
    IPv4-compatible (``::a.b.c.d``), 6to4 (``2002::/16``), NAT64 (``64:ff9b::/96``,
    ``64:ff9b:1::/48``) and Teredo (the client). Each form is matched against the deny-list,
    since a connection to such an address may reach the IPv4 one."""
    forms: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            forms.append(ip.ipv4_mapped)
        if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # not :: and ::1
            forms.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            forms.append(ip.sixtofour)
        if any(ip in prefix for prefix in _NAT64):
            forms.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.teredo is not None:
            forms.append(ip.teredo[1])
    return forms


def is_denied(address: str, deny: Sequence[str]) -> bool:
    """Whether ``address`` (any textual form; a zone id is ignored) or an IPv4 address embedded
    in it lies in one of the ``deny`` networks."""
    networks = [ipaddress.ip_network(n, strict=False) for n in deny]
    forms = address_forms(ipaddress.ip_address(address.split("%", 1)[0]))
    return any(ip.version == net.version and ip in net for ip in forms for net in networks)


def _check_addresses(addresses: Sequence[str], deny: Sequence[str], host: str) -> None:
    if not addresses:
        raise _Refused("workbench.connection", f"{host} does not resolve")
    for address in addresses:
        if is_denied(address, deny):
            raise _Refused("workbench.denied_address", f"{host} resolves to a denied address ({address})")


async def _resolved(resolve: Resolver, host: str, port: int) -> list[str]:
    """The addresses of ``host``; a name that does not resolve is a refusal, not an error."""
    try:
        return list(await asyncio.to_thread(resolve, host, port))
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        raise _Refused("workbench.connection", f"{host} does not resolve ({type(exc).__name__})") from exc


def _split(url: str, refusal: str = "workbench.bad_url") -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``; refused with ``refusal`` when it has none of them, or a
    port outside 0-65535 or a bracketed host that is not an address (urlsplit raises for those)."""
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme, parts.hostname, parts.port
    except ValueError as exc:
        raise _Refused(refusal, f"not a usable URL ({exc})") from None
    if scheme not in ("http", "https") or not host:
        raise _Refused(refusal, "the URL must be http:// or https:// with a host")
    return scheme, host, port or (443 if scheme == "https" else 80)


def _redirect_target(url: str, location: str) -> str:
    try:
        return urljoin(url, location)
    except ValueError as exc:
        raise _Refused("workbench.redirect_refused", f"a redirect to an unusable URL ({exc})") from None


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


async def fetch_handle(
    config: WorkbenchConfig,
    handle_id: str,
    kind: str,
    *,
    resolve: Resolver = None,
) -> FetchOutcome:
    """Fetch one handle's content under every guardrail; never raises for a refusal."""
    try:
        if not config.enabled:
            raise _Refused("workbench.disabled", "handle content fetch is off (ALLOW_HANDLE_CONTENT_FETCH)")
        if kind not in config.admit_kinds:
            raise _Refused("workbench.kind_not_admitted", f"kind {kind!r} is not in WORKBENCH_ADMIT_KINDS")
        if not config.resolver_url:
            raise _Refused("workbench.bad_url", "WORKBENCH_RESOLVER_URL is not set")
        if handle_id.strip() in DOT_SEGMENTS:
            # "/" is escaped below, so only a whole id of dots would climb out of the base path.
            raise _Refused("workbench.bad_handle", "a handle id cannot be '.' or '..'")
        url = config.resolver_url.rstrip("/") + "/" + quote(handle_id, safe="")
        async with asyncio.timeout(config.timeout_ms / 1000):
            content, media_type = await _fetch(config, url, resolve or _resolve)
    except _Refused as refused:
        return FetchOutcome(
            ok=False, reason_code=refused.reason_code, detail=refused.detail, handle_id=handle_id, kind=kind
        )
    except TimeoutError:
        return FetchOutcome(
            ok=False,
            reason_code="workbench.timeout",
            detail=f"no complete answer within {config.timeout_ms} ms",
            handle_id=handle_id,
            kind=kind,
        )
    return FetchOutcome(
        ok=True,
        reason_code="workbench.fetched",
        detail="fetched",
        handle_id=handle_id,
        kind=kind,
        content=content,
        media_type=media_type,
        size_bytes=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
    )


async def _fetch(config: WorkbenchConfig, url: str, resolve: Resolver) -> tuple[bytes, str]:
    origin = _split(url)
    headers = {"Accept": "text/plain"}
    if config.bearer_token is not None:
        headers["Authorization"] = f"Bearer {config.bearer_token.get_secret_value()}"
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
        for hop in range(MAX_REDIRECTS + 1):
            scheme, host, port = _split(url, "workbench.redirect_refused" if hop else "workbench.bad_url")
            if (scheme, host, port) != origin:
                raise _Refused("workbench.redirect_refused", "a redirect to another host, port or scheme")
            addresses = await _resolved(resolve, host, port)
            _check_addresses(addresses, config.deny_networks, host)
            target, extra = url, {}
            if scheme == "http":  # connect to the address just checked (no second lookup)
                parts = urlsplit(url)
                pinned = addresses[0] if ":" not in addresses[0] else f"[{addresses[0]}]"
                target = urlunsplit((scheme, f"{pinned}:{port}", parts.path, parts.query, ""))
                extra = {"Host": parts.netloc.rsplit("@", 1)[-1]}
            try:
                async with client.stream("GET", target, headers={**headers, **extra}) as response:
                    if response.is_redirect:
                        url = _redirect_target(url, response.headers.get("location", ""))
                        continue
                    return await _read(response, config.max_bytes)
            except httpx.TransportError as exc:
                raise _Refused(
                    "workbench.connection", f"the resolver cannot be reached ({type(exc).__name__})"
                ) from exc
        raise _Refused("workbench.redirect_refused", f"more than {MAX_REDIRECTS} redirects")


async def _read(response: httpx.Response, max_bytes: int) -> tuple[bytes, str]:
    if response.status_code != 200:
        raise _Refused("workbench.http_error", f"the resolver answered HTTP {response.status_code}")
    media_type = _media_type(response.headers.get("content-type"))
    if media_type != "text/plain":
        raise _Refused("workbench.content_type", f"content type {media_type or 'none'!r} is not text/plain")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _Refused("workbench.too_large", f"{declared} bytes declared; the limit is {max_bytes}")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > max_bytes:
            raise _Refused("workbench.too_large", f"more than {max_bytes} bytes; the limit is {max_bytes}")
    return bytes(body), response.headers.get("content-type", "text/plain")


def workbench_config(settings: Settings) -> WorkbenchConfig:
    """Content fetch of workbench handles, from the ALLOW_HANDLE_CONTENT_FETCH / WORKBENCH_* variables."""
    token = settings.workbench_bearer_token
    variables = {
        "ALLOW_HANDLE_CONTENT_FETCH": settings.workbench_fetch,
        "WORKBENCH_RESOLVER_URL": settings.workbench_resolver_url,
        "WORKBENCH_AUTH_BEARER_TOKEN": token.get_secret_value() if token else None,
        "WORKBENCH_FETCH_TIMEOUT_MS": settings.workbench_fetch_timeout_ms,
        "WORKBENCH_MAX_BYTES": settings.workbench_max_bytes,
        "WORKBENCH_ADMIT_KINDS": settings.workbench_admit_kinds,
        "WORKBENCH_DENY_NETWORKS": settings.workbench_deny_networks,
    }
    return WorkbenchConfig.from_env({k: v for k, v in variables.items() if v is not None})
