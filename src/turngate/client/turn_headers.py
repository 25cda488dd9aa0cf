"""The ``X-Turngate-*`` headers of a response, read back as the ids they name.

The gateway percent-encodes ids in headers (UTF-8; docs/OPENAI.md), so a thread id in any script
fits in a header; these helpers decode them (for the OpenAI SDK's raw responses, or any httpx
response).
"""

from __future__ import annotations

from collections.abc import Mapping

from turngate.core.header_values import decode_header_id, encode_header_id

#: The response headers that carry an id (percent-encoded UTF-8).
ID_HEADERS = ("X-Turngate-Thread", "X-Turngate-Turn", "X-Turngate-Correlation-Id")


def turn_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Every ``X-Turngate-*`` header present in ``headers``, by its canonical name; the id
    headers decoded (``X-Turngate-Decision`` is plain ASCII)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    found: dict[str, str] = {}
    for name in (*ID_HEADERS, "X-Turngate-Decision"):
        value = lowered.get(name.lower())
        if value is not None:
            found[name] = decode_header_id(value) if name in ID_HEADERS else value
    return found


__all__ = ["ID_HEADERS", "decode_header_id", "encode_header_id", "turn_headers"]
