"""One provider error table: what the adapters raise, what Temporal retries and what falls back."""

from __future__ import annotations

import re
from pathlib import Path

import turngate
from turngate.core.provider_errors import FALLBACK_CODES, NON_RETRYABLE_PROVIDER_ERRORS, PROVIDER_ERROR_TYPES
from turngate.providers.error_classification import classify_status, status_error_type

SRC = Path(turngate.__file__).parent
RAISED = re.compile(r'"(provider\.[a-z_]+)"')


def test_every_provider_error_type_raised_is_in_the_table() -> None:
    sources = [*sorted((SRC / "providers").glob("*.py")), SRC / "activities" / "provider.py"]
    raised = {name for path in sources for name in RAISED.findall(path.read_text())}
    assert raised, "the adapters raise provider errors"
    assert raised <= set(PROVIDER_ERROR_TYPES), raised - set(PROVIDER_ERROR_TYPES)


def test_status_classification_is_retryable_exactly_as_the_table_says() -> None:
    for status in range(400, 600):
        type_, retryable = status_error_type(status)
        assert retryable is PROVIDER_ERROR_TYPES[type_], status
        assert classify_status(status, vendor="v").retryable is retryable


def test_the_workflow_never_retries_a_malformed_response_nor_falls_back_on_it() -> None:
    assert "provider.invalid_response" in NON_RETRYABLE_PROVIDER_ERRORS
    assert "provider.invalid_response" not in FALLBACK_CODES
    assert {"provider.timeout", "llm.timeout", "provider.rate_limited"} <= FALLBACK_CODES
