"""The fast path of canonical_bytes (orjson, for plain values) writes exactly what rfc8785 writes,
and loads_plain calls nothing plain that holds a float or an unsafe integer."""

from __future__ import annotations

import json

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.core.canonical import (
    CanonicalizationError,
    canonical_bytes,
    loads_plain,
    plain_canonical_bytes,
)

keys = st.text(max_size=8)
scalars = st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60) | st.text(max_size=20)
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_same_bytes_as_rfc8785_or_the_same_refusal(value) -> None:
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalizationError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U0001f600": 2},  # code-point vs UTF-16 key order
        {"b": '\u2028\x7f\x1f\n\t"\\', "a": [True, None, -0, 9007199254740991]},
        {"é": 1, "e": 2, "z": {"y": [1, "ü"]}},
    ],
)
def test_edge_cases(value) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [2**53, "\ud800", {"x": float("nan")}, {1: 2}])
def test_refusals_still_refuse(value) -> None:
    with pytest.raises(CanonicalizationError):
        canonical_bytes(value)


# --------------------------------------------------------------------------- loads_plain


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_plain_values_parsed_from_text_get_the_rfc8785_bytes(value) -> None:
    for text in (
        json.dumps(value),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, ensure_ascii=False, indent=1),  # numbers after newlines and spaces
    ):
        parsed, plain = loads_plain(text)
        assert parsed == json.loads(text) or parsed != parsed  # NaN never equals itself
        if plain:
            expected = _bytes_or_refusal(rfc8785.dumps, parsed)
            assert _bytes_or_refusal(plain_canonical_bytes, parsed) == expected


def _bytes_or_refusal(write, value) -> bytes | str:
    try:
        return write(value)
    except (CanonicalizationError, rfc8785.CanonicalizationError):
        return "refused"


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1.0}',
        '{"a":[1e5]}',
        '{"a":NaN}',
        '{"a":-Infinity}',
        '{"\ue000":1,"\U0001f600":2}',
        '{"\\ue000":1}',
        '{"\\ud83d\\ude00":1,"\\uffff":2}',
        '{"a":"\\udead"}',
        "1.5",
        " -2e3",
        '{"a" :\n  [ 0.5 ]}',
    ],
)
def test_not_plain(text: str) -> None:
    parsed, plain = loads_plain(text)
    assert not plain
    assert parsed is not None


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', '{"b":"\\u00e9","a":[true,null,-0,9007199254740991,"12345678901234567"]}', "[]", '"x"'],
)
def test_plain(text: str) -> None:
    parsed, plain = loads_plain(text)
    assert plain
    assert plain_canonical_bytes(parsed) == rfc8785.dumps(parsed)


@pytest.mark.parametrize(
    "text", ['{"a":9007199254740992}', '{"a":-12345678901234567890}', '{"a":[1,-9007199254740992]}']
)
def test_unsafe_integers_are_refused_when_written(text: str) -> None:
    parsed, _ = loads_plain(text)
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(parsed)
    with pytest.raises(CanonicalizationError):
        plain_canonical_bytes(parsed)
    with pytest.raises(CanonicalizationError):
        canonical_bytes(parsed)


def test_plain_canonical_bytes_still_refuses_what_the_encoder_refuses() -> None:
    with pytest.raises(CanonicalizationError):
        plain_canonical_bytes({"a": "\ud800"})  # a lone surrogate is not UTF-8
