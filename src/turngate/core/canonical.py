"""Canonical JSON (RFC 8785) and the one digest format turngate uses: ``sha256:<hex>``.

Every digest that turngate stores is produced here, so the replay/verify tool recomputes with
exactly the code that decided.

``rfc8785`` is the definition. Most values are *plain* (no floats, safe integers, no object key
whose code-point order differs from its UTF-16 order); for those, ``orjson`` with sorted keys
writes the same bytes about ten times faster than ``json.dumps`` (checked against ``rfc8785``
under hypothesis in tests/core/test_canonical_fast_path.py), and ``verify`` digests every stored
event that way. (Parsing stays with ``json``: its hooks report floats and large integers as they
are read; orjson would need a second walk, and reads integers past 64 bits as floats.)
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson
import rfc8785

DIGEST_PREFIX = "sha256:"
_SAFE_INT = 2**53 - 1  # RFC 8785 numbers are IEEE doubles: larger integers are refused
_SORT_SAFE_BELOW = "\ue000"  # keys below this sort the same by code point and by UTF-16 unit
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# In JSON text: a character at or above U+E000, or a \\u escape that decodes to one or to a
# surrogate (object keys with those may sort differently by code point and by UTF-16 unit).
_HIGH_CHAR_RE = re.compile(r"[\ue000-\U0010ffff]")
_HIGH_ESCAPE_RE = re.compile(r"\\u[dDeEfF]")
# Sorted keys; integers beyond 2**53 - 1 refused (RFC 8785 numbers are IEEE doubles).
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


class CanonicalizationError(ValueError):
    """A value cannot be written as canonical JSON (NaN/Infinity, non-string keys, ...)."""

    reason_code = "canonical.unrepresentable"


def _json_writes_it_canonically(value: Any) -> bool:
    """True when ``json.dumps(sort_keys=True)`` writes exactly the RFC 8785 bytes of ``value``:
    no floats (their shortest form is where the two differ), no integers outside the safe range,
    and no object keys whose code-point order differs from UTF-16 order. Strings are escaped the
    same way by both (control characters only, lowercase ``\\u00xx``).

    Scalars are checked where they are found (only containers go on the stack): this walk runs
    over every value digested, so it is written for speed; the rules are the ones above."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str or (not key.isascii() and max(key) >= _SORT_SAFE_BELOW):
                    return False
            children: Any = item.values()
        elif kind is list or kind is tuple:
            children = item
        else:
            return False
        for child in children:
            kind = type(child)
            if kind is str or kind is bool or child is None:
                continue
            if kind is int:
                if -_SAFE_INT <= child <= _SAFE_INT:
                    continue
                return False
            if kind is dict or kind is list or kind is tuple:
                push(child)
                continue
            return False
    return True


class _NotPlain(Exception):
    """Raised by the parse hooks: the text holds a float or a non-finite constant."""


def _refuse_number(_text: str) -> Any:
    raise _NotPlain


# Floats and NaN/Infinity stop the parse (the hooks run only for those tokens); integers are
# parsed natively and their range is enforced by the encoder (``OPT_STRICT_INTEGER``).
_PLAIN_DECODER = json.JSONDecoder(parse_float=_refuse_number, parse_constant=_refuse_number)


def _text_may_sort_differently(text: str) -> bool:
    if text.isascii():
        return "\\u" in text and _HIGH_ESCAPE_RE.search(text) is not None
    return _HIGH_CHAR_RE.search(text) is not None or _HIGH_ESCAPE_RE.search(text) is not None


def loads_plain(text: str | bytes) -> tuple[Any, bool]:
    """``json.loads(text)``, and whether the parsed value is *plain*: one that
    :func:`plain_canonical_bytes` may write without walking it first (no floats, no NaN or
    Infinity, no key whose order could differ; an integer outside the safe range is refused by
    that encoder, and then by ``rfc8785``).

    The parse hooks catch floats; a substring test (a regex only for non-ASCII text) catches
    characters. Conservative: a high character in a string value, not a key, only makes the
    value not plain. Raises ``ValueError`` (or ``TypeError``) as ``json.loads`` does.
    """
    raw = text.decode("utf-8") if isinstance(text, bytes | bytearray) else text
    if not isinstance(raw, str):
        raise TypeError(f"JSON text must be str or bytes, not {type(raw).__name__}")
    if not _text_may_sort_differently(raw):
        try:
            # raw_decode: what decode does minus its two whitespace regex calls (the stored
            # text is compact); leading whitespace or trailing data take the full path below.
            value, end = _PLAIN_DECODER.raw_decode(raw)
            if end == len(raw):
                return value, True
        except (json.JSONDecodeError, _NotPlain):
            pass
    return json.loads(raw), False


def plain_canonical_bytes(value: Any) -> bytes:
    """:func:`canonical_bytes` of a value the caller knows to be plain (its parts came from
    :func:`loads_plain` reporting ``True``, plus ``str``/``None`` values and integers):
    straight to the encoder. Anything the encoder refuses still gets the full path."""
    try:
        return orjson.dumps(value, option=_SORTED)
    except TypeError:  # orjson.JSONEncodeError: an unsafe integer, a lone surrogate, deep nesting...
        return canonical_bytes(value)


def canonical_bytes(value: Any) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON (UTF-8 bytes).

    Accepts what JSON can represent: dict with str keys, list/tuple, str, int, float
    (finite), bool, None. Anything else is rejected with :class:`CanonicalizationError`.
    Plain values (the common case: no floats) take ``orjson``, which writes the same bytes;
    everything else goes through the ``rfc8785`` package.
    """
    if _json_writes_it_canonically(value):
        try:
            return orjson.dumps(value, option=_SORTED)
        except TypeError:
            pass  # e.g. a lone surrogate or nesting past orjson's depth: rfc8785 decides
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
