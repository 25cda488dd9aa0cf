"""The AES-256-GCM payload codec and its key configuration."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from turngate.encryption import (
    ENCODING,
    KEY_ID_METADATA,
    DecryptionError,
    EncryptionCodec,
    EncryptionConfigError,
    EncryptionKeys,
    ensure_key_file,
    generate_key_entry,
    load_keys,
)

SECRET = "the quarterly numbers are bad"


def _entry(key_id: str, size: int = 32) -> str:
    return f"{key_id}={base64.b64encode(os.urandom(size)).decode()}"


def _payload(text: str = SECRET) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text}"'.encode())


def _codec(*entries: str) -> EncryptionCodec:
    return EncryptionCodec(EncryptionKeys.parse("\n".join(entries), source="test"))


async def test_round_trip_hides_the_payload_and_restores_it_exactly() -> None:
    codec = _codec(_entry("k1"))
    [sealed] = await codec.encode([_payload()])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert SECRET.encode() not in sealed.SerializeToString()
    [opened] = await codec.decode([sealed])
    assert opened == _payload()


async def test_each_encryption_uses_a_fresh_nonce() -> None:
    codec = _codec(_entry("k1"))
    first, second = await codec.encode([_payload(), _payload()])
    assert first.data != second.data


async def test_rotation_new_key_encrypts_old_keys_still_decrypt() -> None:
    old = _entry("k1")
    [sealed_before] = await _codec(old).encode([_payload()])
    rotated = _codec(_entry("k2"), old)  # the new key first
    [sealed_after] = await rotated.encode([_payload()])
    assert sealed_after.metadata[KEY_ID_METADATA] == b"k2"
    assert await rotated.decode([sealed_before, sealed_after]) == [_payload(), _payload()]


async def test_a_retired_key_is_named_in_the_error() -> None:
    [sealed] = await _codec(_entry("k1")).encode([_payload()])
    with pytest.raises(DecryptionError, match="'k1'"):
        await _codec(_entry("k2")).decode([sealed])


async def test_tampering_or_relabelling_fails_authentication() -> None:
    k1, k2 = _entry("k1"), _entry("k2")
    codec = _codec(k1, k2)
    [sealed] = await codec.encode([_payload()])
    flipped = Payload()
    flipped.CopyFrom(sealed)
    flipped.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="authentication"):
        await codec.decode([flipped])
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[KEY_ID_METADATA] = b"k2"
    with pytest.raises(DecryptionError):
        await codec.decode([relabelled])


async def test_payloads_from_before_encryption_pass_through() -> None:
    assert await _codec(_entry("k1")).decode([_payload()]) == [_payload()]


@pytest.mark.parametrize(("size", "ok"), [(31, False), (32, True), (33, False), (16, False)])
def test_a_key_must_be_exactly_32_bytes(size: int, ok: bool) -> None:
    if ok:
        assert len(EncryptionKeys.parse(_entry("k", size), source="t").keys["k"]) == 32
    else:
        with pytest.raises(EncryptionConfigError) as caught:
            EncryptionKeys.parse(_entry("k", size), source="t")
        assert caught.value.reason_code == "encryption.bad_key"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "encryption.no_keys"),
        ("# only a comment\n", "encryption.no_keys"),
        ("nokeyhere", "encryption.bad_key_entry"),
        ("bad id=" + base64.b64encode(bytes(32)).decode(), "encryption.bad_key_entry"),
        ("k=not base64!", "encryption.bad_key"),
        (
            "k=" + base64.b64encode(bytes(32)).decode() + ",k=" + base64.b64encode(bytes(32)).decode(),
            "encryption.duplicate_key_id",
        ),
    ],
)
def test_bad_key_material_is_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(EncryptionConfigError) as caught:
        EncryptionKeys.parse(text, source="t")
    assert caught.value.reason_code == reason


def test_key_ids_at_and_over_64_characters() -> None:
    assert EncryptionKeys.parse(_entry("a" * 64), source="t").active_id == "a" * 64
    with pytest.raises(EncryptionConfigError):
        EncryptionKeys.parse(_entry("a" * 65), source="t")


def test_keys_from_env_text_commas_or_a_file_first_one_active(tmp_path: Path) -> None:
    keys = load_keys(f"{_entry('new')},{_entry('old')}", None)
    assert keys is not None and keys.active_id == "new" and set(keys.keys) == {"new", "old"}
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-11\n{_entry('b')}\n{_entry('a')}\n")
    from_file = load_keys(None, path)
    assert from_file is not None and from_file.active_id == "b"
    assert load_keys(None, None) is None
    with pytest.raises(EncryptionConfigError) as both:
        load_keys(_entry("x"), path)
    assert both.value.reason_code == "encryption.ambiguous_keys"
    with pytest.raises(EncryptionConfigError) as missing:
        load_keys(None, tmp_path / "absent")
    assert missing.value.reason_code == "encryption.keys_unreadable"


def test_the_dev_key_file_is_owner_only_and_kept(tmp_path: Path) -> None:
    path = ensure_key_file(tmp_path / "dir" / "encryption-keys", "dev-1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    ensure_key_file(path, "dev-1")
    assert path.read_text() == first
    assert load_keys(None, path) is not None
    assert generate_key_entry("x") != generate_key_entry("x")
