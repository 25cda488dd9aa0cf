"""What the translated APIs' request models share: fields an API adds later are ignored (as on
``/v1/chat/completions``), fields turngate cannot honour are refused by name, and a validation
error becomes an admission error naming the request's own field (``input[2].call_id``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from turngate.core.events import AdmissionError

#: Validation error types, and the reason codes they answer (else ``admission.invalid_value``).
_REASON_BY_ERROR = {"missing": "admission.missing_field"}

M = TypeVar("M", bound=BaseModel)


class Open(BaseModel):
    model_config = ConfigDict(extra="ignore")


def invalid(exc: ValidationError, prefix: str = "") -> AdmissionError:
    """The first validation error of ``exc``, naming its field after ``prefix``."""
    first = exc.errors(include_url=False)[0]
    where = prefix + ".".join(str(part) for part in first.get("loc", ()))
    code = _REASON_BY_ERROR.get(str(first.get("type")), "admission.invalid_value")
    return AdmissionError(code, f"{where}: {first.get('msg')}", where)


def validated(model: type[M], raw: Any, where: str = "") -> M:
    """``raw`` as ``model``; an error names its field inside ``where`` (``tools[1]``)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise invalid(exc, f"{where}." if where else "") from exc


def parse_body(
    data: Any,
    model: type[M],
    refused: Mapping[str, str],
    refuse: Callable[[str, str], AdmissionError],
    unset: tuple[Any, ...] = (None,),
) -> M:
    """The body as ``model``, once no field of ``refused`` (name -> what it is) is sent with a
    value other than ``unset``."""
    if not isinstance(data, dict):
        raise AdmissionError("admission.invalid_type", "the request must be a JSON object")
    for name, what in refused.items():
        if data.get(name) not in unset:
            raise refuse(name, what)
    return validated(model, data)
