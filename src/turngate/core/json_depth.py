"""A nesting-depth cap on JSON request bodies, checked on the raw text before any parse.

Python's ``json.loads`` recurses once per level (100,000 ``[`` raise ``RecursionError``), and so
do pydantic, canonical JSON and every serializer after it. So a body's depth is counted first,
without recursion: string literals are removed (brackets inside them are text), then the running
count of opening minus closing brackets is taken. A body deeper than :data:`MAX_JSON_DEPTH` is
refused with ``admission.too_deep`` before anything else reads it.
"""

from __future__ import annotations

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
