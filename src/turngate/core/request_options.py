"""What a client asked of the model besides its messages: structured output, tool choice and
the sampling parameters, as one typed, frozen record.

An OpenAI-style request carries them (``response_format``, ``tool_choice``,
``parallel_tool_calls``, ``top_p``, ``seed``, ...). They travel in the INTENT's
``inputs.client_context.request_options`` (only the ones sent, and only when one was sent: a
turn without them records exactly what it always did), so they are inside the INTENT's digest
and the DECISION's ``context_digest``; the provider call carries them to the adapter, which maps
each to its vendor's wire format or refuses it (``provider.unsupported_parameter``).

The answer to a ``json_schema`` / ``json_object`` request is checked against it
(:func:`check_output`) and the verdict recorded in the EXECUTION (``output_check``).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from turngate.core.canonical import digest
from turngate.core.tools import schema_errors

REQUEST_OPTIONS_KEY = "request_options"
#: A provider adapter cannot honour an option for its vendor (the call is refused, 400).
REASON_UNSUPPORTED_PARAMETER = "provider.unsupported_parameter"
#: Errors listed in an ``output_check`` at most (the rest are counted).
MAX_OUTPUT_ERRORS = 5


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only what the client sent is recorded: an absent option is an absent key.
        return {k: v for k, v in handler(self).items() if v is not None}


class JsonSchemaFormat(_Frozen):
    """``response_format.json_schema``: a named JSON schema the answer must follow."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    schema_: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    description: str | None = None
    strict: bool | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)


class ResponseFormat(_Frozen):
    """``text`` (the default), ``json_object`` (any JSON object) or ``json_schema``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def wire(self) -> dict[str, Any]:
        """The OpenAI ``response_format`` object, as the client sent it."""
        return self.model_dump(mode="json")

    def target_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must satisfy (``json_object``: any object; ``text``: none)."""
        if self.type == "json_schema" and self.json_schema is not None:
            return self.json_schema.schema_
        if self.type == "json_object":
            return {"type": "object"}
        return None


class ToolChoice(_Frozen):
    """``none`` / ``auto`` / ``required`` (some tool), or ``function``: the named tool."""

    mode: Literal["none", "auto", "required", "function"]
    name: str | None = None

    def wire(self) -> str | dict[str, Any]:
        """OpenAI's ``tool_choice``."""
        if self.mode == "function":
            return {"type": "function", "function": {"name": self.name}}
        return self.mode


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class RequestOptions(_Frozen):
    """Every option besides messages, tools and temperature that the client set (None: unset)."""

    response_format: ResponseFormat | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    reasoning_effort: ReasoningEffort | None = None
    #: The client limited the answer with ``max_completion_tokens`` (forwarded as itself to
    #: OpenAI, whose reasoning models refuse ``max_tokens``); the limit is the intent's budget.
    max_completion_tokens: bool | None = None

    def recorded(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ProviderOptions(RequestOptions):
    """What a provider adapter receives: the client's options and the names of the tools it
    marked ``strict``."""

    strict_tools: tuple[str, ...] | None = None


def request_options_of(raw: Any) -> RequestOptions | None:
    """The recorded options (None: none were sent). Raises ``pydantic.ValidationError`` or
    ``TypeError`` on a malformed record."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise TypeError(f"{REQUEST_OPTIONS_KEY} must be an object")
    data = dict(raw)
    if isinstance(data.get("stop"), list):
        data["stop"] = tuple(data["stop"])
    return RequestOptions.model_validate(data)


class OutputCheck(_Frozen):
    """The EXECUTION's verdict on an answer that had to be JSON (``output_check``)."""

    format: Literal["json_object", "json_schema"]
    schema_digest: str
    valid: bool
    errors: tuple[str, ...] = ()

    def recorded(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def check_output(text: str, response_format: ResponseFormat) -> OutputCheck | None:
    """Whether ``text`` parses as JSON and satisfies the format's schema (None: a ``text``
    format, nothing to check). The schema check covers the keywords :func:`schema_errors`
    implements; others are not checked."""
    schema = response_format.target_schema()
    if schema is None or response_format.type == "text":
        return None
    errors: list[str]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        errors = [f"$: the answer is not JSON ({exc.msg} at {exc.pos})"]
    else:
        errors = schema_errors(value, schema)
    if len(errors) > MAX_OUTPUT_ERRORS:
        errors = [*errors[:MAX_OUTPUT_ERRORS], f"... and {len(errors) - MAX_OUTPUT_ERRORS} more"]
    return OutputCheck(
        format=response_format.type,
        schema_digest=digest(schema),
        valid=not errors,
        errors=tuple(errors),
    )
