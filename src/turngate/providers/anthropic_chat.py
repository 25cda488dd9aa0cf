"""Anthropic Messages API through the official ``anthropic`` SDK, streaming.

The WHOLE message list is sent, shaped the way the Messages API requires:

- every ``system`` message (wherever it stands) goes, in order, joined by a blank line, to the
  ``system`` parameter;
- the other messages keep their order; consecutive messages of the same role are merged into one
  (contents joined by a blank line), because the API requires user/assistant alternation;
- the list must start with a user message: when the first non-system message is an assistant
  message it is kept, preceded by the fixed user turn :data:`LEADING_USER_PLACEHOLDER`;
- a request without any user/assistant message is a ``provider.bad_request`` (nothing is sent);
- a tool loop: an assistant message's calls become ``tool_use`` blocks after its text, a tool
  result a ``tool_result`` block in a user turn (consecutive results share one turn; merged
  contents become block lists).

``max_tokens`` is required by Anthropic: :data:`DEFAULT_MAX_TOKENS` when the request has none.
A request's ``temperature`` is not sent: the Messages API of the supported SDK has no such
parameter.
Offered tools go out as ``tools=[{name, description, input_schema}]`` (nothing when none are
offered); structured output as ``output_config.format``, tool choice as ``tool_choice`` and the
other options as Anthropic names them, or refused
(:func:`~turngate.providers.request_params.anthropic_params`); a ``tool_use`` content block and
its ``input_json_delta`` fragments become one complete call, emitted once after the text.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic

from turngate.providers.base import (
    ChatMessage,
    ProviderError,
    ProviderRequest,
    ResponseIdOnce,
    StreamChunk,
    Usage,
)
from turngate.providers.error_classification import classify_exception
from turngate.providers.request_params import anthropic_params
from turngate.providers.tool_calls import ToolCallAccumulator
from turngate.settings import Settings

DEFAULT_MAX_TOKENS = 1024
LEADING_USER_PLACEHOLDER = "(conversation continues)"
_JOIN = "\n\n"


Content = str | list[dict[str, Any]]


def _content(message: ChatMessage) -> Content:
    """A message's content: its text, or content blocks for a tool loop (an assistant's text and
    ``tool_use`` blocks; a tool result's ``tool_result`` block, sent in a user turn)."""
    if message.tool_call_id is not None:
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}]
    if not message.tool_calls:
        return message.content
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments() or {}}
        for call in message.tool_calls
    ]
    return blocks


def _blocks(content: Content) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _merged(first: Content, second: Content) -> Content:
    if isinstance(first, str) and isinstance(second, str):
        return first + _JOIN + second
    return _blocks(first) + _blocks(second)


def to_anthropic(messages: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` in Messages API shape; see the module docstring for the rules."""
    system_parts = [m.content for m in messages if m.role == "system"]
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "user" if message.role == "tool" else message.role
        content = _content(message)
        if turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": _merged(turns[-1]["content"], content)}
        else:
            turns.append({"role": role, "content": content})
    if not turns:
        raise ProviderError(
            "provider.bad_request",
            "anthropic: the request has no user or assistant message",
            retryable=False,
        )
    if turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": LEADING_USER_PLACEHOLDER})
    system = _JOIN.join(system_parts) if system_parts else None
    return system, turns


class AnthropicChatProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        models: tuple[str, ...] = (),
        timeout_s: float = 60.0,
    ) -> None:
        self.models = tuple(models)
        self._secrets = (api_key,)
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url or None,
            max_retries=0,
            timeout=timeout_s,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicChatProvider:
        if settings.anthropic_api_key is None:
            raise ValueError("ANTHROPIC_API_KEY is not set")
        return cls(
            api_key=settings.anthropic_api_key.get_secret_value(),
            base_url=settings.anthropic_base_url,
            models=settings.anthropic_models,
            timeout_s=float(settings.llm_wall_clock_s),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        system, turns = to_anthropic(request.messages)
        max_tokens = DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens
        params: dict[str, Any] = {
            "model": request.model,
            "messages": turns,
            "max_tokens": max_tokens,
            "stream": True,
        }
        if system is not None:
            params["system"] = system
        params |= anthropic_params(request)
        calls = ToolCallAccumulator(self.name)
        response_id = ResponseIdOnce()
        input_tokens: int | None = None
        output_tokens: int | None = None
        try:
            response = await self._client.messages.create(**params)
            async with response:
                async for event in response:
                    if event.type == "message_start":
                        response_id.see(event.message.id)
                        input_tokens = _total_input(event.message.usage)
                        output_tokens = event.message.usage.output_tokens
                    elif event.type == "content_block_start":
                        block = event.content_block
                        if block.type == "tool_use":
                            calls.start(
                                event.index,
                                call_id=block.id,
                                name=block.name,
                                initial_arguments=json.dumps(block.input) if block.input else None,
                            )
                    elif event.type == "content_block_delta":
                        if event.delta.type == "text_delta" and event.delta.text:
                            yield StreamChunk(text=event.delta.text, response_id=response_id.take())
                        elif event.delta.type == "input_json_delta":
                            calls.add_arguments(event.index, event.delta.partial_json)
                    elif event.type == "message_delta":
                        output_tokens = event.usage.output_tokens
                        if event.usage.input_tokens is not None:
                            input_tokens = _total_input(event.usage)
        except Exception as exc:
            error = classify_exception(exc, vendor=self.name, secrets=self._secrets)
            if error is None:
                raise
            raise error from None
        if calls:
            yield StreamChunk(tool_calls=calls.complete(), response_id=response_id.take())
        yield StreamChunk(usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens))

    async def aclose(self) -> None:
        await self._client.close()


def _total_input(usage: Any) -> int | None:
    """All prompt tokens the model read: uncached input plus cache writes and cache reads."""
    if usage.input_tokens is None:
        return None
    total: int = (
        usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    )
    return total
