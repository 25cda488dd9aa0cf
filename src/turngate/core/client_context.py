"""Client-supplied context: messages and tools a client sent with its intent that are not ledger
events (an OpenAI-style ``messages`` history the ledger cannot match, a client system message,
client-defined function tools), the results of the tool calls this turn answers, the
sampling temperature the client asked for and its other request options (structured output,
tool choice, sampling: :mod:`turngate.core.request_options`).

They travel in the INTENT's ``inputs.client_context``, so they are recorded, inside the INTENT's
digest and the DECISION's ``context_digest`` (``inputs`` is part of the intent view), and visible
to policy. The prompt places them after the prompt pack's system prompt and before the declared
history, in the order sent; they are never trimmed by the token budget (the client chose them).

``tool_results`` are this turn's input when it continues a tool loop: the outputs of the tool
calls the referenced EXECUTION made, sent to the model as tool messages in place of a user
message (the INTENT's ``message`` is their contents joined, so policies and limits that read the
message read them too). A later turn that sends them back as history resolves them to this
INTENT.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    model_serializer,
    model_validator,
)

from turngate.core.request_options import ProviderOptions, RequestOptions, request_options_of
from turngate.core.tools import ToolSpec, ToolSpecName

CLIENT_CONTEXT_KEY = "client_context"
REASON_INVALID_CLIENT_CONTEXT = "intent.invalid_client_context"


ToolCallId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class ClientToolCall(BaseModel):
    """A tool call as an assistant message carries it (``arguments`` decoded from JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: ToolCallId
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    arguments: dict[str, Any] = Field(default_factory=dict)


class ClientToolResult(BaseModel):
    """The output of one tool call, answered by the client (OpenAI ``role: tool``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    tool_call_id: ToolCallId
    content: str


def without_unused_tool_fields(message: dict[str, Any]) -> dict[str, Any]:
    """A message's dump without empty ``tool_calls`` and without a ``tool_call_id`` of None."""
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
    if message.get("tool_call_id") is None:
        message.pop("tool_call_id", None)
    return message


class ClientMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    #: Why the client's message is here rather than a ref: ``system`` or ``unmatched_history``.
    source: Literal["system", "unmatched_history"]
    tool_calls: tuple[ClientToolCall, ...] = ()  # an assistant message's calls
    tool_call_id: ToolCallId | None = None  # a tool message: the call it answers

    @model_validator(mode="after")
    def _shape(self) -> ClientMessage:
        if not self.content and not self.tool_calls:
            raise ValueError("content must not be empty (only an assistant message with tool calls may)")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message carries tool calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message, and only a tool message, names its tool_call_id")
        return self

    @model_serializer(mode="wrap")
    def _without_unused_tool_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A plain message dumps as it always did: its digest in the manifest stays the same.
        return without_unused_tool_fields(handler(self))


class ClientTool(BaseModel):
    """A function tool the client offers the model (OpenAI ``tools[].function``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: ToolSpecName
    description: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    #: OpenAI's ``strict``: the arguments must follow the schema exactly (only when sent).
    strict: bool | None = None

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    @model_serializer(mode="wrap")
    def _without_unset_strict(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A tool sent without ``strict`` dumps as it always did (its digest stays the same).
        dumped: dict[str, Any] = handler(self)
        if dumped.get("strict") is None:
            dumped.pop("strict", None)
        return dumped


class ClientContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    source: str = "client"
    messages: tuple[ClientMessage, ...] = ()
    tools: tuple[ClientTool, ...] = ()
    tool_results: tuple[ClientToolResult, ...] = ()  # this turn's input when it continues a tool loop
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    # Structured output, tool choice and sampling options (only when the client sent one).
    request_options: RequestOptions | None = None


class InvalidClientContext(ValueError):
    """``inputs.client_context`` is present but malformed (the turn is denied with
    ``intent.invalid_client_context``)."""


def client_context_of(inputs: Mapping[str, Any]) -> ClientContext | None:
    """The intent's client context (``None`` when it sent none)."""
    raw = inputs.get(CLIENT_CONTEXT_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidClientContext(f"inputs.{CLIENT_CONTEXT_KEY} must be an object")
    try:
        # JSON-shaped input (lists, not tuples): validated in lax mode for the containers only.
        data = dict(raw)
        data["messages"] = tuple(data.get("messages") or ())
        data["tools"] = tuple(data.get("tools") or ())
        data["tool_results"] = tuple(data.get("tool_results") or ())
        data["messages"] = tuple(_with_tuple_calls(m) for m in data["messages"])
        if isinstance(data.get("temperature"), int) and not isinstance(data.get("temperature"), bool):
            data["temperature"] = float(data["temperature"])
        data["request_options"] = request_options_of(data.get("request_options"))
        context = ClientContext.model_validate(data)
    except (ValidationError, TypeError) as exc:
        raise InvalidClientContext(f"inputs.{CLIENT_CONTEXT_KEY}: {exc}") from exc
    for tool in context.tools:
        try:
            tool.spec()
        except ValidationError as exc:
            raise InvalidClientContext(f"inputs.{CLIENT_CONTEXT_KEY}: tool {tool.name!r}: {exc}") from exc
    return context


def _with_tuple_calls(message: Any) -> Any:
    if isinstance(message, Mapping) and isinstance(message.get("tool_calls"), list):
        return {**message, "tool_calls": tuple(message["tool_calls"])}
    return message


def provider_options(client: ClientContext | None) -> ProviderOptions | None:
    """The options a provider call carries for this client context (None: nothing to carry, so
    a call without options stays as it always was)."""
    if client is None:
        return None
    strict = tuple(tool.name for tool in client.tools if tool.strict)
    if client.request_options is None and not strict:
        return None
    base = client.request_options.model_dump() if client.request_options is not None else {}
    return ProviderOptions.model_validate(base | ({"strict_tools": strict} if strict else {}))


def recorded_tool_calls(execution_payload: Mapping[str, Any]) -> list[ClientToolCall]:
    """The admitted tool calls an EXECUTION recorded, with the ids the client was given (the
    model's id, else ``call_<position>``)."""
    calls = execution_payload.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [
        ClientToolCall(
            id=str(call.get("id") or f"call_{position}"),
            name=str(call.get("name")),
            arguments=dict(call.get("arguments") or {}),
        )
        for position, call in enumerate(calls)
        if isinstance(call, Mapping)
    ]


def recorded_client_context(intent_payload: Mapping[str, Any]) -> ClientContext | None:
    """The client context a recorded INTENT carries (None: none, or a malformed one, whose turn
    was denied)."""
    inputs = intent_payload.get("inputs")
    try:
        return client_context_of(inputs) if isinstance(inputs, Mapping) else None
    except InvalidClientContext:
        return None


def recorded_request_options(inputs: Mapping[str, Any]) -> RequestOptions | None:
    """The request options an intent's inputs carry (None: none, or malformed ones, whose turn
    was denied); reads only them, not the whole client context."""
    raw = inputs.get(CLIENT_CONTEXT_KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        return request_options_of(raw.get("request_options"))
    except (ValidationError, TypeError):
        return None


def tool_results_of(intent_payload: Mapping[str, Any]) -> tuple[ClientToolResult, ...]:
    """The tool results an INTENT answered with (none for a turn that is not a tool loop's)."""
    context = recorded_client_context(intent_payload)
    return context.tool_results if context is not None else ()
