"""Ids in headers: every id the API accepts encodes to visible ASCII and decodes back exactly;
plain ids read the same either way; the request header is read the way responses write it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turngate.api.openai_compat.turn import thread_from_header
from turngate.client import turn_headers
from turngate.core.header_values import decode_header_id, encode_header_id

# What admission lets through: any characters but control characters and lone surrogates.
IDS = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=200)


@given(IDS)
def test_any_accepted_id_round_trips_as_visible_ascii(value: str) -> None:
    encoded = encode_header_id(value)
    assert encoded.isascii() and encoded.isprintable() and " " not in encoded
    encoded.encode("latin-1")  # what the HTTP server must be able to send
    assert decode_header_id(encoded) == value
    assert thread_from_header(encoded) == value


def test_plain_ids_read_the_same_and_percent_is_always_encoded() -> None:
    for plain in ("support-42", "c-1a2b", "user@example.com:thread/7", "a.b_c~d"):
        assert encode_header_id(plain) == plain
    assert encode_header_id("100%") == "100%25"
    assert encode_header_id("支持-42 🧵") == "%E6%94%AF%E6%8C%81-42%20%F0%9F%A7%B5"


def test_the_request_header_reads_percent_encoding_and_raw_utf8() -> None:
    assert thread_from_header("%E3%82%B9%E3%83%AC%E3%83%83%E3%83%89") == "スレッド"
    # raw UTF-8 bytes arrive as Latin-1 text (what the ASGI server decodes them to)
    assert thread_from_header("スレッド".encode().decode("latin-1")) == "スレッド"
    assert thread_from_header("Gr\xfc\xdfe") == "Grüße"  # Latin-1 that is not UTF-8: as sent
    assert thread_from_header("") is None and thread_from_header(None) is None


def test_the_client_decodes_the_id_headers() -> None:
    headers = {
        "x-turngate-thread": encode_header_id("支持-42 🧵"),
        "X-Turngate-Turn": "chatcmpl-1",
        "x-turngate-decision": "ALLOW",
        "content-type": "application/json",
    }
    assert turn_headers(headers) == {
        "X-Turngate-Thread": "支持-42 🧵",
        "X-Turngate-Turn": "chatcmpl-1",
        "X-Turngate-Decision": "ALLOW",
    }
