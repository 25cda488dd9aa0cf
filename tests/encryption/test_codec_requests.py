"""What `/codec/encode` and `/codec/decode` accept, on a real stack with encryption keys: only an
unscoped admin may call them; the claim check follows only pointers sealed under the
deployment's keys, so no caller can probe the artifact store by hash; the body is capped in
bytes; a malformed body or payload answers 4xx with a code, never 500."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload

from tests.security.conftest import bearer, make_key
from tests.stack import Stack, make_settings, running_stack
from turngate.api.codec import MAX_CODEC_BODY_BYTES
from turngate.artifacts.temporal_codec import POINTER_ENCODING
from turngate.devserver import DevServer
from turngate.encryption import EncryptionCodec
from turngate.settings import Settings
from turngate.temporal_client import encryption_keys


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _wire(payload: Payload) -> dict[str, Any]:
    return {"metadata": {k: _b64(v) for k, v in payload.metadata.items()}, "data": _b64(payload.data)}


def _pointer_payload(pointer: dict[str, Any]) -> Payload:
    return Payload(metadata={"encoding": POINTER_ENCODING}, data=json.dumps(pointer).encode())


@pytest.fixture
def settings(tmp_path: Path, temporal_server: DevServer) -> Settings:
    key = f"k1={base64.b64encode(os.urandom(32)).decode()}"
    return make_settings(tmp_path, temporal_server.address, auth_mode="keys", encryption_keys=key)


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    async with running_stack(settings, worker=False) as running:
        yield running


async def test_no_key_can_probe_the_artifact_store_by_hash(settings: Settings, stack: Stack) -> None:
    alice = make_key(settings, "alice", "intent.write,snapshot.read")
    bob_admin = make_key(settings, "bob", "admin")
    operator = make_key(settings, "*", "admin")
    upload = await stack.http.post("/artifacts", content=b"alice's private contract", headers=bearer(alice))
    assert upload.status_code == 201, upload.text
    present = upload.json()["artifact"]
    absent = present | {"sha256": "sha256:" + "ab" * 32, "path": present["path"][:-64] + "ab" * 32}
    probes = [{"payloads": [_wire(_pointer_payload(pointer))]} for pointer in (present, absent)]

    # A tenant-scoped admin key may not use the codec at all (it decodes every tenant's history).
    for probe in probes:
        refused = await stack.http.post("/codec/decode", json=probe, headers=bearer(bob_admin))
        assert (refused.status_code, refused.json()["reason_code"]) == (403, "auth.forbidden")
    refused = await stack.http.post("/codec/encode", json=probes[0], headers=bearer(bob_admin))
    assert (refused.status_code, refused.json()["reason_code"]) == (403, "auth.forbidden")

    # An operator's pointer in the clear is never followed: it comes back as sent, present or not.
    for probe in probes:
        answer = await stack.http.post("/codec/decode", json=probe, headers=bearer(operator))
        assert answer.status_code == 200, answer.text
        assert answer.json() == probe

    # Nor can a pointer be sealed through /codec/encode and then followed.
    sealed = await stack.http.post("/codec/encode", json=probes[0], headers=bearer(operator))
    assert (sealed.status_code, sealed.json()["reason_code"]) == (400, "codec.pointer_refused")
    assert "alice's private contract" not in sealed.text


async def test_a_sealed_pointer_is_followed(settings: Settings, stack: Stack) -> None:
    # What a history holds: the claim check's pointer, sealed under the deployment's key. The
    # codec reads it back; one whose artifact the store no longer holds is 404 artifact.not_found
    # (gone for good), not a 503 that invites the Temporal UI to retry forever.
    operator = make_key(settings, "*", "admin")
    keys = encryption_keys(settings)
    assert keys is not None
    seal = EncryptionCodec(keys)
    value = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps("x" * 70_000).encode())
    from turngate.temporal_client import data_converter

    [stored] = await data_converter(settings).payload_codec.encode([value])  # type: ignore[union-attr]
    answer = await stack.http.post(
        "/codec/decode", json={"payloads": [_wire(stored)]}, headers=bearer(operator)
    )
    assert answer.status_code == 200, answer.text
    assert base64.b64decode(answer.json()["payloads"][0]["data"]) == value.data

    sha = "cd" * 32
    gone = {
        "artifact_id": f"sha256:{sha}",
        "path": f"standard/temporal_payload/cd/{sha}",
        "sha256": f"sha256:{sha}",
    }
    missing = seal.encrypt(_pointer_payload(gone | {"size_bytes": 70_000}))
    answer = await stack.http.post(
        "/codec/decode", json={"payloads": [_wire(missing)]}, headers=bearer(operator)
    )
    assert (answer.status_code, answer.json()["reason_code"]) == (404, "artifact.not_found"), answer.text
    assert str(settings.data_dir) not in answer.text


_BASE = json.dumps({"payloads": [{"metadata": {"k": _b64(b"json/plain")}, "data": _b64(b'"x"')}]}).encode()


def _sized(size: int, filler: str) -> bytes:
    """A valid payload list of exactly ``size`` bytes (UTF-8): one payload whose metadata key is
    padded with ``filler`` characters (a multibyte ``filler``: fewer characters than bytes)."""
    room = size - len(_BASE)
    width = len(filler.encode())
    padding = "a" * (room % width) + filler * (room // width)
    return _BASE.replace(b'"k"', f'"k{padding}"'.encode(), 1)


@pytest.mark.parametrize(
    ("size", "filler", "status"),
    [
        (MAX_CODEC_BODY_BYTES - 1, "a", 200),
        (MAX_CODEC_BODY_BYTES, "a", 200),
        (MAX_CODEC_BODY_BYTES + 1, "a", 413),
        # "ž" is 2 bytes in UTF-8: the cap counts bytes, not characters
        (MAX_CODEC_BODY_BYTES, "ž", 200),
        (MAX_CODEC_BODY_BYTES + 1, "ž", 413),
    ],
)
async def test_the_body_is_capped_in_bytes(
    settings: Settings, stack: Stack, size: int, filler: str, status: int
) -> None:
    operator = make_key(settings, "*", "admin")
    body = _sized(size, filler)
    assert len(body) == size
    if filler != "a":
        assert len(body.decode()) < MAX_CODEC_BODY_BYTES * 0.6  # far fewer characters than bytes
    headers = bearer(operator) | {"Content-Type": "application/json"}
    answer = await stack.http.post("/codec/decode", content=body, headers=headers)
    assert answer.status_code == status, answer.text[:300]
    if status == 413:
        assert answer.json()["reason_code"] == "codec.too_large"
    else:
        assert answer.json()["payloads"][0]["data"] == _b64(b'"x"')


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"\xff\xfe{", 400, "codec.bad_request"),
        (b"[" * 50_000 + b"]" * 50_000, 400, "codec.bad_request"),
        (b'{"payloads": 5}', 400, "codec.bad_request"),
        (b'{"payloads": [{"data": "not base64!"}]}', 400, "codec.bad_request"),
        (b'{"payloads": [{"metadata": {"encoding": 5}}]}', 400, "codec.bad_request"),
        (b'{"payloads": [], "extra": 1}', 400, "codec.bad_request"),
        (b"", 400, "codec.bad_request"),
    ],
)
async def test_a_malformed_body_is_400(
    settings: Settings, stack: Stack, body: bytes, status: int, code: str
) -> None:
    operator = make_key(settings, "*", "admin")
    for path in ("/codec/decode", "/codec/encode"):
        answer = await stack.http.post(path, content=body, headers=bearer(operator))
        assert (answer.status_code, answer.json()["reason_code"]) == (status, code), answer.text[:300]


async def test_a_malformed_payload_is_4xx(settings: Settings, stack: Stack) -> None:
    operator = make_key(settings, "*", "admin")
    encrypted = {"encoding": b"binary/encrypted", "encryption-key-id": b"k1"}
    cases = [
        (Payload(metadata=encrypted, data=b""), 422, "codec.undecryptable"),  # no nonce at all
        (Payload(metadata=encrypted, data=b"\0" * 11), 422, "codec.undecryptable"),
        (Payload(metadata=encrypted, data=b"\0" * 40), 422, "codec.undecryptable"),
        (
            Payload(metadata=encrypted | {"encryption-key-id": b"\xff"}, data=b"\0" * 40),
            422,
            "codec.undecryptable",
        ),
    ]
    for payload, status, code in cases:
        answer = await stack.http.post(
            "/codec/decode", json={"payloads": [_wire(payload)]}, headers=bearer(operator)
        )
        assert (answer.status_code, answer.json()["reason_code"]) == (status, code), (payload, answer.text)
    # A pointer in the clear that is not even a pointer: returned as sent, never parsed.
    junk = {"payloads": [_wire(Payload(metadata={"encoding": POINTER_ENCODING}, data=b"{not json"))]}
    answer = await stack.http.post("/codec/decode", json=junk, headers=bearer(operator))
    assert (answer.status_code, answer.json()) == (200, junk)
