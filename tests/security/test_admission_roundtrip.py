"""Found by the fuzzer: a float such as 1.0956e16 is written by RFC 8785 as plain digits, which
read back as an integer beyond the safe range, so a recorded INTENT could no longer be
re-canonicalized (/snapshot and /verify answered 500). Admission refuses what would not read
back as itself."""

from __future__ import annotations

import json

import pytest

from turngate.core.events import AdmissionError, parse_intent


def _body(value: object) -> str:
    inner = {"intent_type": "chat.message", "inputs": {"n": value}, "payload": {"message": "hi"}}
    return json.dumps({"interface_version": 3, "correlation_id": "c-1", "payload": inner})


@pytest.mark.parametrize("value", [-1.0956007384195972e16, 2.0**53, 1e20, 9007199254740993])
def test_numbers_that_do_not_read_back_are_refused(value: float) -> None:
    with pytest.raises(AdmissionError) as refused:
        parse_intent(_body(value))
    assert refused.value.reason_code == "admission.invalid_value"


@pytest.mark.parametrize("value", [1.5, 1e300, 2**53 - 1, -0.0, 1e-300])
def test_ordinary_numbers_are_admitted(value: float) -> None:
    assert parse_intent(_body(value)).payload.inputs["n"] == value
