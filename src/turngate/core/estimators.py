"""Token estimator names and the estimator type (the prompt-assembly pipeline's token budget).

* ``chars/3`` (default): ``ceil(len(text) / 3)`` (~3 characters per token: right for
  Lithuanian, conservative for English). It is :func:`turngate.core.assembly.chars_div_3`.
* ``tiktoken:<encoding>``: exact counts with OpenAI's BPE, built from a verified local file by
  :mod:`turngate.prompts.token_estimators` when the worker starts.

Pure: this module only says what a name means. Loading an encoding file is I/O and happens once,
at worker start; workflow code looks the loaded estimator up by the name the worker recorded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from turngate.core.assembly import chars_div_3

__all__ = [
    "CHARS_DIV_3",
    "DEFAULT_ESTIMATOR",
    "TIKTOKEN_PREFIX",
    "EstimatorError",
    "TokenEstimator",
    "chars_div_3",
    "tiktoken_encoding",
]

DEFAULT_ESTIMATOR = "chars/3"
TIKTOKEN_PREFIX = "tiktoken:"
_ENCODING_NAME = re.compile(r"^[a-z0-9_]{1,64}$")


class EstimatorError(ValueError):
    """An estimator name that is not understood, or not loaded in this process."""

    def __init__(self, message: str, reason_code: str = "estimator.unknown") -> None:
        super().__init__(message)
        self.reason_code = reason_code


@dataclass(frozen=True)
class TokenEstimator:
    """The estimator in effect: ``name`` is what counts, ``requested`` what was configured."""

    requested: str
    name: str
    count: Callable[[str], int]
    fallback_reason: str | None = None

    def __call__(self, text: str) -> int:
        return self.count(text)


CHARS_DIV_3 = TokenEstimator(DEFAULT_ESTIMATOR, DEFAULT_ESTIMATOR, chars_div_3)


def tiktoken_encoding(name: str) -> str | None:
    """The tiktoken encoding ``name`` asks for, or None for ``chars/3``.

    Raises :class:`EstimatorError` (``estimator.unknown``) for a name of neither form.
    """
    if name == DEFAULT_ESTIMATOR:
        return None
    if name.startswith(TIKTOKEN_PREFIX):
        encoding = name[len(TIKTOKEN_PREFIX) :]
        if not _ENCODING_NAME.match(encoding):
            raise EstimatorError(f"invalid tiktoken encoding name in {name!r}")
        return encoding
    raise EstimatorError(
        f"unknown token estimator {name!r}; use {DEFAULT_ESTIMATOR!r} or 'tiktoken:<encoding>'"
    )
