"""The chat message: one entry of the message list that assembly builds and providers send.

It lives in core because assembly produces it; providers import it from here (core imports no
provider code). A tool loop continues with an ``assistant`` message carrying the calls the model
made (``ChatMessage.tool_calls``) followed by one ``tool`` message per result
(``ChatMessage.tool_call_id``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from turngate.core.client_context import without_unused_tool_fields


class ToolCallChunk(BaseModel):
    """One complete tool call as the model made it.

    ``arguments`` is always the JSON **text** of the argument object, exactly as the model
    produced it (fragments joined; a vendor that sends an object, like Ollama, has it serialised
    with ``json.dumps``; ``"{}"`` when the model sent none). It may be invalid JSON: models do
    that, and the caller decides (:meth:`parsed_arguments`).
    """

    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict; None when they are not a JSON object."""
        text = self.arguments.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class ChatMessage(BaseModel):
    """One message of the assembled list. ``tool_calls``: an assistant message's calls;
    ``tool_call_id``: a tool message's call (both absent from a plain message's dump)."""

    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCallChunk, ...] = ()
    tool_call_id: str | None = None

    @model_serializer(mode="wrap")
    def _without_unused_tool_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unused_tool_fields(handler(self))
