"""The guarded Workbench handle fetch against a local fake resolver: success, wrong content type,
too large (declared and streamed), timeout, redirects (same host followed, other host refused),
a resolver URL at a denied address, off by default, kind allowlist; the token never leaks."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.security.fake_resolver import LOOPBACK_ALLOWED, FakeResolver, fake_resolver
from turngate.security.workbench import DEFAULT_DENY_NETWORKS, WorkbenchConfig, fetch_handle, is_denied

TOKEN = "wb-token-SECRET-0123456789"


@pytest.fixture
def resolver() -> Iterator[FakeResolver]:
    with fake_resolver() as server:
        yield server


def config(resolver_url: str | None, **overrides: object) -> WorkbenchConfig:
    values: dict[str, object] = {
        "enabled": True,
        "resolver_url": resolver_url,
        "bearer_token": TOKEN,
        "timeout_ms": 1000,
        "max_bytes": 4096,
        "admit_kinds": ("note",),
        "deny_networks": LOOPBACK_ALLOWED,  # the resolver listens on 127.0.0.1
    }
    values.update(overrides)
    return WorkbenchConfig(**values)


async def test_success_returns_content_with_its_digest(resolver: FakeResolver) -> None:
    outcome = await fetch_handle(config(resolver.base_url), "ok", "note")
    assert outcome.ok and outcome.reason_code == "workbench.fetched"
    assert outcome.content == b"hello from the workbench"
    assert outcome.size_bytes == len(outcome.content) and len(outcome.sha256 or "") == 64
    assert resolver.seen_auth == [f"Bearer {TOKEN}"]
    assert resolver.seen_host == [f"127.0.0.1:{resolver.server_port}"]


@pytest.mark.parametrize(
    ("handle", "reason"),
    [
        ("html", "workbench.content_type"),
        ("big-declared", "workbench.too_large"),
        ("big-streamed", "workbench.too_large"),
        ("slow", "workbench.timeout"),
        ("redirect-other", "workbench.redirect_refused"),
        ("redirect-bad-port", "workbench.redirect_refused"),
        ("missing", "workbench.http_error"),
    ],
)
async def test_each_guardrail_refuses_with_its_reason(
    resolver: FakeResolver, handle: str, reason: str
) -> None:
    outcome = await fetch_handle(config(resolver.base_url), handle, "note")
    assert not outcome.ok and outcome.content is None
    assert outcome.reason_code == reason, outcome.detail
    assert TOKEN not in outcome.model_dump_json() and TOKEN not in repr(outcome)


async def test_a_redirect_on_the_same_host_is_followed(resolver: FakeResolver) -> None:
    outcome = await fetch_handle(config(resolver.base_url), "redirect-same", "note")
    assert outcome.ok and outcome.content == b"hello from the workbench"


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data", "http://[fe80::1]/x", "http://0.0.0.0:9/x"]
)
async def test_a_resolver_at_a_denied_address_is_never_contacted(url: str) -> None:
    outcome = await fetch_handle(config(url), "ok", "note")
    assert outcome.reason_code == "workbench.denied_address"


async def test_the_deny_list_is_configurable_and_checked_on_resolution(resolver: FakeResolver) -> None:
    denied = config(resolver.base_url, deny_networks=("127.0.0.0/8",))
    assert (await fetch_handle(denied, "ok", "note")).reason_code == "workbench.denied_address"

    def rebinding(_host: str, _port: int) -> list[str]:
        return ["169.254.169.254"]  # a name that resolves to the metadata address

    named = config("http://workbench.internal/h")
    outcome = await fetch_handle(named, "ok", "note", resolve=rebinding)
    assert outcome.reason_code == "workbench.denied_address"
    assert resolver.seen_auth == []


@pytest.mark.parametrize(
    ("overrides", "kind", "reason"),
    [
        ({"enabled": False}, "note", "workbench.disabled"),
        ({}, "binary", "workbench.kind_not_admitted"),
        ({"resolver_url": "file:///etc/passwd"}, "note", "workbench.bad_url"),
        ({"resolver_url": "ftp://example.org/x"}, "note", "workbench.bad_url"),
        ({"resolver_url": None}, "note", "workbench.bad_url"),
        ({"resolver_url": "http://127.0.0.1:99999/h"}, "note", "workbench.bad_url"),
        ({"resolver_url": "http://127.0.0.1:65536/h"}, "note", "workbench.bad_url"),
        ({"resolver_url": "http://127.0.0.1:-1/h"}, "note", "workbench.bad_url"),
        ({"resolver_url": "http://127.0.0.1:port/h"}, "note", "workbench.bad_url"),
        ({"resolver_url": "http://[::1/h"}, "note", "workbench.bad_url"),
    ],
)
async def test_configuration_guardrails(overrides: dict, kind: str, reason: str) -> None:
    outcome = await fetch_handle(config(**{"resolver_url": "http://127.0.0.1:9/h", **overrides}), "ok", kind)
    assert outcome.reason_code == reason


def test_off_by_default_and_read_from_the_seed_variables() -> None:
    assert WorkbenchConfig.from_env({}).enabled is False
    cfg = WorkbenchConfig.from_env(
        {
            "ALLOW_HANDLE_CONTENT_FETCH": "true",
            "WORKBENCH_RESOLVER_URL": "https://wb.example/h",
            "WORKBENCH_AUTH_BEARER_TOKEN": TOKEN,
            "WORKBENCH_FETCH_TIMEOUT_MS": "500",
            "WORKBENCH_MAX_BYTES": "100",
            "WORKBENCH_ADMIT_KINDS": "note, doc",
        }
    )
    assert cfg.enabled and cfg.timeout_ms == 500 and cfg.max_bytes == 100
    assert cfg.admit_kinds == ("note", "doc")
    assert TOKEN not in repr(cfg) and TOKEN not in cfg.model_dump_json()


# ----------------------------------------------------------------- IPv6 forms of denied IPv4


LOOPBACK_DENIED = ("127.0.0.0/8", "::1/128")


@pytest.mark.parametrize(
    "host",
    ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "127.0.0.1", "[::1]", "localhost", "2130706433", "0177.0.0.1"],
)
async def test_a_loopback_resolver_denied_in_every_spelling_is_never_contacted(
    resolver: FakeResolver, host: str
) -> None:
    """The attack: the resolver on 127.0.0.1, denied by the deny-list, reached as an
    IPv4-mapped IPv6 address; every other spelling was already refused and must stay so."""
    url = f"http://{host}:{resolver.server_port}/h"
    outcome = await fetch_handle(config(url, deny_networks=LOOPBACK_DENIED), "ok", "note")
    assert outcome.reason_code == "workbench.denied_address", outcome.detail
    assert resolver.seen_auth == []  # never contacted: the token went nowhere


async def test_a_name_resolving_to_a_mapped_loopback_address_is_refused(resolver: FakeResolver) -> None:
    def mapped(_host: str, _port: int) -> list[str]:
        return ["::ffff:127.0.0.1"]

    named = config(f"http://workbench.internal:{resolver.server_port}/h", deny_networks=LOOPBACK_DENIED)
    outcome = await fetch_handle(named, "ok", "note", resolve=mapped)
    assert outcome.reason_code == "workbench.denied_address"
    assert resolver.seen_auth == []


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:169.254.169.254",  # IPv4-mapped
        "::ffff:a9fe:a9fe",  # the same, in hex
        "::169.254.169.254",  # IPv4-compatible
        "2002:a9fe:a9fe::1",  # 6to4
        "64:ff9b::169.254.169.254",  # NAT64, well-known prefix
        "64:ff9b:1::a9fe:a9fe",  # NAT64, local-use prefix
        "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254
        "169.254.169.254",
        "fe80::1%eth0",
        "::",
    ],
)
def test_embedded_metadata_addresses_are_denied_by_default(address: str) -> None:
    assert is_denied(address, DEFAULT_DENY_NETWORKS)


@pytest.mark.parametrize(
    "address", ["2001:db8::1", "93.184.215.14", "172.32.0.1", "100.128.0.1", "2606:4700::1"]
)
def test_public_addresses_pass_the_default_deny_list(address: str) -> None:
    assert not is_denied(address, DEFAULT_DENY_NETWORKS)


@pytest.mark.parametrize("handle", ["..", ".", " .. "])
async def test_a_dot_segment_handle_never_leaves_the_resolvers_base_path(
    resolver: FakeResolver, handle: str
) -> None:
    outcome = await fetch_handle(config(resolver.base_url), handle, "note")
    assert outcome.reason_code == "workbench.bad_handle"
    assert resolver.seen_auth == []
    dots = await fetch_handle(config(resolver.base_url), "...", "note")  # a name, not a step
    assert dots.reason_code == "workbench.http_error"  # the fake resolver knows no such handle


async def test_a_name_that_does_not_resolve_is_a_refusal_not_an_exception() -> None:
    def unknown(host: str, _port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: Name or service not known")

    outcome = await fetch_handle(config("http://workbench.invalid/h"), "ok", "note", resolve=unknown)
    assert not outcome.ok and outcome.reason_code == "workbench.connection"
    assert "does not resolve" in outcome.detail


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",
        "fd12::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "169.254.169.254",
    ],
)
def test_the_default_deny_list_covers_loopback_and_private_ranges(address: str) -> None:
    assert WorkbenchConfig.from_env({}).deny_networks == DEFAULT_DENY_NETWORKS
    assert is_denied(address, DEFAULT_DENY_NETWORKS)


async def test_by_default_a_resolver_on_loopback_is_never_contacted(resolver: FakeResolver) -> None:
    outcome = await fetch_handle(config(resolver.base_url, deny_networks=DEFAULT_DENY_NETWORKS), "ok", "note")
    assert outcome.reason_code == "workbench.denied_address"
    assert resolver.seen_auth == []


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not-a-network", "fe80::/129"])
def test_a_bad_deny_list_entry_fails_at_start_up(entry: str) -> None:
    # Not inside a fetch, where it would raise for every handle.
    with pytest.raises(ValueError, match="WORKBENCH_DENY_NETWORKS"):
        WorkbenchConfig.from_env({"WORKBENCH_DENY_NETWORKS": f"127.0.0.0/8,{entry}"})
