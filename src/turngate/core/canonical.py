"""Canonical JSON (RFC 8785) and the one digest format turngate uses: ``sha256:<hex>``.

Every digest that turngate stores is produced here, so the replay/verify tool recomputes with
exactly the code that decided.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785

DIGEST_PREFIX = "sha256:"
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class CanonicalizationError(ValueError):
    """A value cannot be written as canonical JSON (NaN/Infinity, non-string keys, ...)."""

    reason_code = "canonical.unrepresentable"


def canonical_bytes(value: Any) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON (UTF-8 bytes).

    Accepts what JSON can represent: dict with str keys, list/tuple, str, int, float
    (finite), bool, None. Anything else is rejected with :class:`CanonicalizationError`.
    """
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalizationError(f"not canonicalizable as RFC 8785 JSON: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise CanonicalizationError(f"not canonicalizable as RFC 8785 JSON: {exc}") from exc


def digest_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` over the RFC 8785 canonical form of ``value``."""
    return digest_bytes(canonical_bytes(value))


def is_digest(value: object) -> bool:
    """True for a well-formed ``sha256:<64 lowercase hex>`` string."""
    return isinstance(value, str) and _DIGEST_RE.match(value) is not None
