"""Optional OIDC/JWT bearer tokens: what a valid token grants, every way a token is refused, and a
token-authenticated turn recorded with its tenant and subject (never the token)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.security.conftest import bearer
from tests.stack import envelope, running_stack
from turngate.ledger import LedgerStore
from turngate.security.oidc import OidcConfig, OidcError, OidcVerifier
from turngate.settings import Settings

ISSUER = "https://idp.example.test/"
AUDIENCE = "turngate"


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


SIGNER, STRANGER = _rsa(), _rsa()


@pytest.fixture
def jwks_file(tmp_path: Path) -> Path:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(SIGNER.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public | {"kid": "k1", "use": "sig", "alg": "RS256"}]}))
    return path


def token(key: Any = SIGNER, alg: str = "RS256", kid: str = "k1", **overrides: Any) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 300,
        "tenant_id": "acme",
        "roles": ["intent.write", "snapshot.read"],
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def verifier(jwks: Path) -> OidcVerifier:
    return OidcVerifier(OidcConfig(issuer=ISSUER, jwks=str(jwks), audience=AUDIENCE))


def test_a_valid_token_is_a_tenant_scoped_principal(jwks_file: Path) -> None:
    who = verifier(jwks_file).principal(token())
    assert (who.tenant_id, who.key_id) == ("acme", "oidc:alice")
    assert who.roles == {"intent.write", "snapshot.read"}
    spaced = verifier(jwks_file).principal(token(roles="snapshot.read unknown.role"))
    assert spaced.roles == {"snapshot.read"}
    admin = verifier(jwks_file).principal(token(roles=["admin"], tenant_id=None))
    assert admin.tenant_id is None and admin.may("intent.write")


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: token(iss="https://evil.example/"), "InvalidIssuer"),
        (lambda: token(aud="other"), "InvalidAudience"),
        (lambda: token(exp=int(time.time()) - 120), "ExpiredSignature"),
        (lambda: token(exp=None), "MissingRequiredClaim"),
        (lambda: token(key=STRANGER), "InvalidSignature"),
        (lambda: token(kid="nope"), "no key with kid"),
        (lambda: token(roles=["root"]), "no turngate role"),
        (lambda: token(tenant_id=None), "only admin tokens may be unscoped"),
        (lambda: token(tenant_id=""), "non-empty string"),
        (lambda: token(tenant_id=" acme"), "white space around it"),
        (lambda: token(tenant_id="acme\u00a0"), "white space around it"),
        (lambda: token(tenant_id="ac\x00me"), "control character"),
        (lambda: token(tenant_id="ac\u0085me"), "control character"),
        (lambda: token(tenant_id="*", roles=["admin"]), "names no tenant"),
        (lambda: token(tenant_id="a" * 201), "longer than 200"),
        (lambda: jwt.encode({"iss": ISSUER, "sub": "a", "exp": 2**40}, None, algorithm="none"), "Invalid"),
    ],
)
def test_each_bad_token_is_refused_with_a_reason(jwks_file: Path, make: Any, why: str) -> None:
    with pytest.raises(OidcError) as caught:
        verifier(jwks_file).principal(make())
    assert why in str(caught.value)


def test_hmac_signed_with_the_public_key_is_refused(jwks_file: Path) -> None:
    # The classic algorithm confusion: HS256 keyed with the public key's PEM.
    pem = SIGNER.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "m", "exp": 2**40, "roles": ["admin"]}
    signing_input = b".".join(_b64(json.dumps(part).encode()) for part in (header, claims))
    forged = (signing_input + b"." + _b64(hmac.new(pem, signing_input, hashlib.sha256).digest())).decode()
    with pytest.raises(OidcError):
        verifier(jwks_file).principal(forged)


def test_configuration_from_the_environment(jwks_file: Path) -> None:
    assert OidcConfig.from_env({}) is None
    cfg = OidcConfig.from_env({"TURNGATE_OIDC_ISSUER": ISSUER, "TURNGATE_OIDC_JWKS": str(jwks_file)})
    assert cfg is not None and cfg.audience is None and "RS256" in cfg.algorithms
    with pytest.raises(ValueError, match="asymmetric only"):
        OidcConfig.from_env(
            {"TURNGATE_OIDC_ISSUER": ISSUER, "TURNGATE_OIDC_JWKS": "x", "TURNGATE_OIDC_ALGORITHMS": "HS256"}
        )


async def test_a_token_authenticated_turn_records_tenant_and_subject(
    secure_settings: Settings, jwks_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNGATE_OIDC_ISSUER", ISSUER)
    monkeypatch.setenv("TURNGATE_OIDC_JWKS", str(jwks_file))
    monkeypatch.setenv("TURNGATE_OIDC_AUDIENCE", AUDIENCE)
    good = token()
    async with running_stack(secure_settings) as stack:
        resp = await stack.http.post(
            "/ingress/intent",
            params={"wait": "decision"},
            json=envelope("hi", correlation_id="c-oidc"),
            headers=bearer(good),
        )
        assert resp.status_code == 202, resp.text
        refused = await stack.http.get("/snapshot", headers=bearer(token(key=STRANGER)))
        assert refused.status_code == 401 and refused.json()["reason_code"] == "auth.invalid"
        read_only = token(roles=["snapshot.read"])
        forbidden = await stack.http.post(
            "/ingress/intent", json=envelope("x", correlation_id="c-ro"), headers=bearer(read_only)
        )
        assert forbidden.status_code == 403
    with LedgerStore(secure_settings.effective_ledger_url) as ledger:
        [intent, *_] = ledger.by_correlation("c-oidc")
        rows = json.dumps([e.model_dump(mode="json") for e in ledger.by_correlation("c-oidc")])
    assert intent.tenant_id == "acme"
    assert intent.payload["principal"] == {"tenant_id": "acme", "key_id": "oidc:alice"}
    assert good not in rows


@pytest.mark.parametrize("claim", [" bob", "bob ", "\tbob", "bob\n", "bo\rb", "bob\u2003"])
async def test_a_tenant_claim_is_matched_exactly_or_refused(
    secure_settings: Settings, jwks_file: Path, monkeypatch: pytest.MonkeyPatch, claim: str
) -> None:
    # " bob" is neither bob (whose data and budgets it would reach) nor a tenant of its own
    # (outside bob's budgets): the token is refused, nothing is recorded.
    monkeypatch.setenv("TURNGATE_OIDC_ISSUER", ISSUER)
    monkeypatch.setenv("TURNGATE_OIDC_JWKS", str(jwks_file))
    monkeypatch.setenv("TURNGATE_OIDC_AUDIENCE", AUDIENCE)
    async with running_stack(secure_settings) as stack:
        refused = await stack.http.post(
            "/ingress/intent",
            params={"wait": "decision"},
            json=envelope("hi", correlation_id="c-spaced"),
            headers=bearer(token(tenant_id=claim)),
        )
        assert refused.status_code == 401, refused.text
        assert refused.json()["reason_code"] == "auth.invalid"
        exact = await stack.http.post(
            "/ingress/intent",
            params={"wait": "decision"},
            json=envelope("hi", correlation_id="c-exact"),
            headers=bearer(token(tenant_id="bob")),
        )
        assert exact.status_code == 202, exact.text
    with LedgerStore(secure_settings.effective_ledger_url) as ledger:
        assert ledger.by_correlation("c-spaced") == []
        assert {e.tenant_id for e in ledger.by_correlation("c-exact")} == {"bob"}
