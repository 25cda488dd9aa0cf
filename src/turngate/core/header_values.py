"""Ids in HTTP headers: percent-encoded UTF-8, so any id the API accepts fits in a header.

Header values are Latin-1 on the wire (and should be visible ASCII): a thread id in CJK or with
an emoji cannot be sent as it is. Every ``X-Turngate-*`` header that carries an id holds the id
percent-encoded (RFC 3986, UTF-8); an id of visible ASCII without ``%`` or space reads the same
either way. :func:`decode_header_id` is the inverse (the request header ``X-Turngate-Thread`` is
read through it too, so a value copied from a response names the same thread).
"""

from __future__ import annotations

from urllib.parse import quote, unquote

#: Visible ASCII kept as it is (besides letters, digits and ``-._~``); ``%`` is always encoded.
_KEPT = "!#$&'()*+,/:;=?@[]"


def encode_header_id(value: str) -> str:
    """``value`` as a header value: visible ASCII, percent-encoded UTF-8 for anything else.
    Lone surrogates (which no UTF-8 byte sequence represents) are encoded as their code units."""
    return quote(value, safe=_KEPT, errors="surrogatepass")


def decode_header_id(value: str) -> str:
    """The id a header value names (the inverse of :func:`encode_header_id`)."""
    return unquote(value, errors="surrogatepass")
