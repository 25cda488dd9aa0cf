"""The provider error types a call can end with, and whether each is worth another attempt.

One table: the provider adapters classify every failure into one of these types where it is
raised (``turngate.providers.error_classification``), and the turn workflow derives from it which
errors Temporal must not retry and after which errors a turn moves on to its next model
candidate. A type added here is classified, retried and fallen back on consistently.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: ``ProviderError.type`` -> retryable (docs/PROVIDERS.md, "Errors").
PROVIDER_ERROR_TYPES: Mapping[str, bool] = MappingProxyType(
    {
        "provider.bad_request": False,
        "provider.auth": False,
        "provider.not_found": False,
        "provider.timeout": True,
        "provider.conflict": True,
        "provider.request_too_large": False,
        "provider.unprocessable": False,
        "provider.rate_limited": True,
        "provider.overloaded": True,
        "provider.server_error": True,
        "provider.client_error": False,
        "provider.connection": True,
        "provider.invalid_response": False,
        # The worker has no client for the provider the turn resolved to.
        "provider.missing_credentials": False,
        # The provider has no equivalent of a request option the client set (nothing was sent).
        "provider.unsupported_parameter": False,
    }
)
#: The provider call's wall clock ran out (a timeout of the activity, not of the provider).
LLM_TIMEOUT = "llm.timeout"

#: Errors Temporal never retries: another attempt would get the same answer.
NON_RETRYABLE_PROVIDER_ERRORS: tuple[str, ...] = tuple(
    code for code, retryable in PROVIDER_ERROR_TYPES.items() if not retryable
)
#: Errors after which a turn tries its next admitted model candidate: the retryable ones, and
#: the wall clock running out.
FALLBACK_CODES: frozenset[str] = frozenset(
    {code for code, retryable in PROVIDER_ERROR_TYPES.items() if retryable} | {LLM_TIMEOUT}
)


def is_retryable(error_type: str) -> bool:
    """Whether a provider error of ``error_type`` is worth another attempt (unknown: no)."""
    return PROVIDER_ERROR_TYPES.get(error_type, False)
