"""Client-supplied context: messages and tools a client sent with its intent that are not ledger
events (an OpenAI-style ``messages`` history the ledger cannot match, a client system message,
client-defined function tools).

They travel in the INTENT's ``inputs.client_context``, so they are recorded, inside the INTENT's
digest and the DECISION's ``context_digest`` (``inputs`` is part of the intent view), and visible
to policy. The prompt places them after the prompt pack's system prompt and before the declared
history, in the order sent; they are never trimmed by the token budget (the client chose them).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from turngate.core.tools import ToolSpec, ToolSpecName

CLIENT_CONTEXT_KEY = "client_context"
REASON_INVALID_CLIENT_CONTEXT = "intent.invalid_client_context"


class ClientMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    role: Literal["system", "user", "assistant"]
    content: Annotated[str, StringConstraints(min_length=1)]
    #: Why the client's message is here rather than a ref: ``system`` or ``unmatched_history``.
    source: Literal["system", "unmatched_history"]


class ClientTool(BaseModel):
    """A function tool the client offers the model (OpenAI ``tools[].function``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: ToolSpecName
    description: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


class ClientContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    source: str = "client"
    messages: tuple[ClientMessage, ...] = ()
    tools: tuple[ClientTool, ...] = ()


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
        context = ClientContext.model_validate(data)
    except (ValidationError, TypeError) as exc:
        raise InvalidClientContext(f"inputs.{CLIENT_CONTEXT_KEY}: {exc}") from exc
    for tool in context.tools:
        try:
            tool.spec()
        except ValidationError as exc:
            raise InvalidClientContext(f"inputs.{CLIENT_CONTEXT_KEY}: tool {tool.name!r}: {exc}") from exc
    return context
