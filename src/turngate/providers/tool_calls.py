"""Shared tool-call plumbing for the adapters: request shapes and streamed-fragment accumulation.

Vendors stream a tool call in pieces (OpenAI: ``delta.tool_calls`` entries keyed by ``index``,
the first with ``id`` and ``function.name``, the rest with ``function.arguments`` fragments;
Anthropic: a ``tool_use`` content block followed by ``input_json_delta`` fragments).
:class:`ToolCallAccumulator` joins them and hands out complete :class:`ToolCallChunk`s, in the
order the model started them, once the stream has ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from turngate.providers.base import ChatMessage, ToolCallChunk, ToolDefinition


def function_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """``[{"type": "function", "function": {name, description, parameters}}]`` (OpenAI, Ollama;
    OpenAI's ``strict`` is added by :func:`~turngate.providers.request_params.openai_tools`)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def openai_message(message: ChatMessage) -> dict[str, Any]:
    """A message in Chat Completions shape: an assistant message's calls as ``tool_calls``
    (arguments as JSON text), a tool result as ``{"role": "tool", "tool_call_id", "content"}``."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


@dataclass
class _Partial:
    id: str | None = None
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    initial: str | None = None  # the whole arguments, when the start already carried them


class ToolCallAccumulator:
    """Joins streamed tool-call fragments, keyed by the vendor's index, into complete calls."""

    def __init__(self, vendor: str) -> None:
        self._vendor = vendor
        self._calls: dict[int, _Partial] = {}

    def start(
        self,
        index: int,
        *,
        call_id: str | None = None,
        name: str | None = None,
        initial_arguments: str | None = None,
    ) -> None:
        """A call begins (or a fragment names its id/name): later values never erase earlier ones.

        ``initial_arguments``: arguments the start already carried whole (used only when no
        fragments follow).
        """
        partial = self._calls.setdefault(index, _Partial())
        if call_id:
            partial.id = partial.id or call_id
        if name:
            partial.name = partial.name or name
        if initial_arguments and partial.initial is None:
            partial.initial = initial_arguments

    def add_arguments(self, index: int, fragment: str | None) -> None:
        if fragment:
            self._calls.setdefault(index, _Partial()).fragments.append(fragment)

    def __bool__(self) -> bool:
        return bool(self._calls)

    def complete(self) -> list[ToolCallChunk]:
        """Every call, in index order; a call without an id gets ``<vendor>-call-<n>`` (1-based)."""
        calls: list[ToolCallChunk] = []
        for position, index in enumerate(sorted(self._calls), start=1):
            partial = self._calls[index]
            arguments = "".join(partial.fragments) or partial.initial or ""
            calls.append(
                ToolCallChunk(
                    id=partial.id or f"{self._vendor}-call-{position}",
                    name=partial.name,
                    arguments=arguments if arguments.strip() else "{}",
                )
            )
        return calls
