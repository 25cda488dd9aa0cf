"""A nesting-depth cap on JSON request bodies, checked on the raw text before any parse.

Python's ``json.loads`` recurses once per level (100,000 ``[`` raise ``RecursionError``), and so
do pydantic, canonical JSON and every serializer after it. So a body's depth is counted first,
without recursion: string literals are removed (brackets inside them are text), then the running
count of opening minus closing brackets is taken. A body deeper than :data:`MAX_JSON_DEPTH` is
refused with ``admission.too_deep`` before anything else reads it.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

#: Containers (objects and arrays) nested in one body, the outermost counted as 1.
MAX_JSON_DEPTH = 64

# A JSON string literal (escapes included); an unterminated one is left in place, and the parse
# that follows refuses the body as malformed.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(body: bytes | str) -> int:
    """The deepest nesting of objects and arrays in ``body`` (0 for a scalar). For malformed
    text this is an estimate the caller only compares with a limit; the parse decides validity."""
    data = body.encode("utf-8", errors="surrogatepass") if isinstance(body, str) else body
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def too_deep(body: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    return json_depth(body) > limit


#: Why JSON text carried inside a JSON string (tool-call arguments) is refused.
EMBEDDED_TOO_DEEP = "too_deep"
EMBEDDED_NOT_UTF8 = "not_utf8"


def embedded_json_problem(text: str, limit: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """What is wrong with ``text``, a JSON document sent as a string value (the body's own checks
    never look inside it): ``(EMBEDDED_TOO_DEEP, detail)`` past ``limit`` levels, checked before
    any parse; ``(EMBEDDED_NOT_UTF8, detail)`` when it decodes to a lone surrogate (``\\ud800``),
    which no UTF-8 record can hold; None when it is fine or is not JSON (its reader says so)."""
    depth = json_depth(text)
    if depth > limit:
        return EMBEDDED_TOO_DEEP, f"nests objects and arrays {depth} levels deep; the limit is {limit}"
    try:
        value = json.loads(text)
    except ValueError:
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return EMBEDDED_NOT_UTF8, "holds a lone surrogate (a \\ud800-\\udfff escape without its pair)"
    return None
