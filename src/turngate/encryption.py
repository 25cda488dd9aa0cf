"""Encrypted Temporal histories: an AES-256-GCM payload codec with keys by id.

Every payload turngate hands to Temporal (workflow and activity inputs and results, signals,
queries, memos) passes through :class:`EncryptionCodec` on the way out and back, so a workflow
history on the Temporal server holds ciphertext, never a prompt or an answer.

Keys come from ``TURNGATE_ENCRYPTION_KEYS`` or the file ``TURNGATE_ENCRYPTION_KEYS_FILE``: one
``id=base64(32 random bytes)`` entry per line (or comma-separated in the variable). The first
entry encrypts; every entry decrypts, so a key rotates by putting a new one first and keeping the
old ones until no open history needs them. Each encrypted payload names its key id. A payload
that was never encrypted (histories from before encryption was turned on) passes through
unchanged, which keeps those histories readable and replayable.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

#: The ``encoding`` metadata of a payload this codec produced.
ENCODING = b"binary/encrypted"
#: Metadata naming the key that encrypted the payload (the AEAD's associated data too, so a
#: payload cannot be re-labelled to another key id).
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
#: The AES-GCM authentication tag that ends every sealed payload.
TAG_BYTES = 16
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Bytes an encrypted payload may add to the plain one: nonce and tag (28), the metadata with a
#: key id of at most 64 characters, and protobuf framing; a generous upper bound, so a payload
#: that the claim check keeps inline still fits its limit once encrypted.
ENCRYPTION_OVERHEAD_BYTES = 256


class EncryptionConfigError(ValueError):
    """Key material that cannot be used; ``reason_code`` says why."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code


class DecryptionError(ValueError):
    """A payload this codec cannot decrypt (unknown key id, or tampered/wrong-key ciphertext)."""


@dataclass(frozen=True)
class EncryptionKeys:
    """Keys by id; ``active_id`` encrypts, all of them decrypt."""

    active_id: str
    keys: dict[str, bytes]

    @classmethod
    def parse(cls, text: str, *, source: str) -> EncryptionKeys:
        """Parse ``id=base64key`` entries (lines or commas; ``#`` starts a comment line)."""
        entries = [
            part.strip()
            for line in text.splitlines()
            if not line.strip().startswith("#")
            for part in line.split(",")
            if part.strip()
        ]
        if not entries:
            raise EncryptionConfigError("encryption.no_keys", f"{source} holds no key")
        keys: dict[str, bytes] = {}
        for entry in entries:
            key_id, sep, encoded = entry.partition("=")
            key_id = key_id.strip()
            if not sep or not _KEY_ID.match(key_id):
                raise EncryptionConfigError(
                    "encryption.bad_key_entry",
                    f"{source}: each entry is id=base64key with an id of 1-64 of A-Z a-z 0-9 . _ -",
                )
            try:
                material = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise EncryptionConfigError(
                    "encryption.bad_key", f"{source}: key {key_id!r} is not valid base64"
                ) from None
            if len(material) != KEY_BYTES:
                raise EncryptionConfigError(
                    "encryption.bad_key",
                    f"{source}: key {key_id!r} is {len(material)} bytes; AES-256 needs {KEY_BYTES}",
                )
            if key_id in keys:
                raise EncryptionConfigError("encryption.duplicate_key_id", f"{source}: {key_id!r} twice")
            keys[key_id] = material
        return cls(active_id=next(iter(keys)), keys=keys)


def generate_key_entry(key_id: str) -> str:
    """A fresh ``id=base64key`` line (32 bytes from the OS's CSPRNG)."""
    if not _KEY_ID.match(key_id):
        raise EncryptionConfigError("encryption.bad_key_entry", f"key id {key_id!r} is not allowed")
    return f"{key_id}={base64.b64encode(os.urandom(KEY_BYTES)).decode('ascii')}"


def load_keys(keys_text: str | None, keys_file: Path | None) -> EncryptionKeys | None:
    """The configured keys, or None when encryption is off. Both set is a configuration error
    (which one would win is not obvious to an operator)."""
    if keys_text and keys_file:
        raise EncryptionConfigError(
            "encryption.ambiguous_keys",
            "set TURNGATE_ENCRYPTION_KEYS or TURNGATE_ENCRYPTION_KEYS_FILE, not both",
        )
    if keys_file is not None:
        try:
            text = keys_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise EncryptionConfigError("encryption.keys_unreadable", f"{keys_file}: {exc}") from None
        return EncryptionKeys.parse(text, source=str(keys_file))
    if keys_text:
        return EncryptionKeys.parse(keys_text, source="TURNGATE_ENCRYPTION_KEYS")
    return None


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each serialized payload; a fresh random 96-bit nonce per payload."""

    def __init__(self, keys: EncryptionKeys) -> None:
        # imported here: a process without encryption keys never loads the library (about 8 MB)
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._invalid_tag = InvalidTag
        self._active_id = keys.active_id
        self._ciphers = {key_id: AESGCM(material) for key_id, material in keys.keys.items()}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self._active_id.encode("ascii")
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self._active_id].encrypt(nonce, payload.SerializeToString(), key_id)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was on: readable as it is
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode("ascii", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise DecryptionError(
                f"payload encrypted with key {key_id!r}, which is not among the configured keys"
            )
        if len(payload.data) < NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(f"payload under key {key_id!r} is too short to be sealed")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = cipher.decrypt(nonce, sealed, key_id.encode("ascii"))
        except self._invalid_tag:
            raise DecryptionError(f"payload under key {key_id!r} fails authentication") from None
        return Payload.FromString(plain)


def ensure_key_file(path: Path, key_id: str) -> Path:
    """``path`` holding one fresh key (owner-only), created on first use and kept afterwards:
    histories written with it stay readable across restarts (``turngate dev --encrypt``)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(generate_key_entry(key_id) + "\n")
    return path
