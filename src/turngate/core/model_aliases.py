"""The models file: model aliases with ordered fallback candidates (``provider:model``) and
their prices, validated. Pure, no I/O: the worker loads the file (``turngate.spend.models_file``)
and the DECISION records its digest (docs/BUDGETS.md).

Prices are integer micro-units per million tokens (``MICROS``): a price with up to six decimals
is exact and the DECISION payload holds no floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, ConfigDict

from turngate.core.canonical import digest

#: Output tokens reserved for a turn that sets no ``budget.max_tokens`` (models file may override).
DEFAULT_OUTPUT_RESERVE_TOKENS = 1024
MICROS = 1_000_000


class SpendError(ValueError):
    """A models file or budget that cannot be used, with a documented code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Price(_Frozen):
    input_micros_per_mtok: int
    output_micros_per_mtok: int


class ModelsConfig(_Frozen):
    """The models file, validated: ``aliases`` name ordered ``provider:model`` candidates."""

    aliases: dict[str, tuple[str, ...]] = {}
    prices: dict[str, Price] = {}
    output_reserve_tokens: int = DEFAULT_OUTPUT_RESERVE_TOKENS


def split_candidate(candidate: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` -> ``("openai", "gpt-4o")`` (the model id may contain colons)."""
    provider, sep, model = candidate.partition(":")
    if not sep or not provider or not model or provider != provider.strip() or model != model.strip():
        raise SpendError("models.invalid_candidate", f"{candidate!r} is not provider:model")
    return provider, model


def _micros(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SpendError("models.invalid_price", f"{where} must be a number")
    try:
        amount = Decimal(str(value)) * MICROS
    except InvalidOperation as exc:
        raise SpendError("models.invalid_price", f"{where} is not a number: {value!r}") from exc
    if not amount.is_finite() or amount < 0:
        raise SpendError("models.invalid_price", f"{where} must be a finite number >= 0")
    if amount != amount.to_integral_value():
        raise SpendError("models.invalid_price", f"{where} has more than six decimals: {value!r}")
    return int(amount)


def parse_models(data: Any) -> ModelsConfig:
    """Validate a models file's content (already decoded from JSON or YAML)."""
    if not isinstance(data, Mapping):
        raise SpendError("models.invalid", "the models file must hold an object")
    unknown = sorted(set(data) - {"models", "prices", "output_reserve_tokens"})
    if unknown:
        raise SpendError("models.invalid", f"unknown top-level keys: {', '.join(unknown)}")
    aliases: dict[str, tuple[str, ...]] = {}
    models = data.get("models") or {}
    if not isinstance(models, Mapping):
        raise SpendError("models.invalid", "models must be an object of aliases")
    for alias, entry in models.items():
        candidates = entry.get("candidates") if isinstance(entry, Mapping) else None
        if not isinstance(alias, str) or not alias.strip():
            raise SpendError("models.invalid_alias", f"alias {alias!r} must be a non-empty string")
        if not isinstance(candidates, list) or not candidates:
            raise SpendError("models.invalid_alias", f"models.{alias}.candidates must be a non-empty list")
        for candidate in candidates:
            if not isinstance(candidate, str):
                raise SpendError("models.invalid_candidate", f"models.{alias}: {candidate!r} is not a string")
            split_candidate(candidate)
        if len(set(candidates)) != len(candidates):
            raise SpendError("models.invalid_alias", f"models.{alias} lists a candidate twice")
        aliases[alias] = tuple(candidates)
    prices: dict[str, Price] = {}
    raw_prices = data.get("prices") or {}
    if not isinstance(raw_prices, Mapping):
        raise SpendError("models.invalid", "prices must be an object")
    for candidate, price in raw_prices.items():
        split_candidate(str(candidate))
        if not isinstance(price, Mapping) or set(price) != {"input_per_mtok", "output_per_mtok"}:
            raise SpendError(
                "models.invalid_price", f"prices.{candidate} needs exactly input_per_mtok and output_per_mtok"
            )
        prices[str(candidate)] = Price(
            input_micros_per_mtok=_micros(price["input_per_mtok"], f"prices.{candidate}.input_per_mtok"),
            output_micros_per_mtok=_micros(price["output_per_mtok"], f"prices.{candidate}.output_per_mtok"),
        )
    reserve = data.get("output_reserve_tokens", DEFAULT_OUTPUT_RESERVE_TOKENS)
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 1:
        raise SpendError("models.invalid", "output_reserve_tokens must be an integer >= 1")
    return ModelsConfig(aliases=aliases, prices=prices, output_reserve_tokens=reserve)


def models_digest(config: ModelsConfig) -> str:
    return digest(config.model_dump(mode="json"))
