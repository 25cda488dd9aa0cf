"""Ollama ``/api/chat`` through the official ``ollama`` SDK, streaming NDJSON.

The whole message list goes out in order, system messages included. ``max_tokens`` becomes
``options.num_predict``. Usage comes from ``prompt_eval_count`` / ``eval_count`` of the final
(``done``) chunk. Offered tools go out as ``tools=[{"type": "function", "function": {...}}]``
(nothing when none are offered); Ollama sends each tool call whole in ``message.tool_calls`` with
the arguments as an object and no id: they are collected, serialised with ``json.dumps``, given
the ids ``ollama-call-<n>`` and emitted once after the text. A tool loop goes back as an assistant
message with ``tool_calls`` (arguments as objects) and ``role: tool`` messages naming the tool
(``tool_name``: Ollama matches results by name, it has no call ids). ``temperature`` becomes
``options.temperature``; structured output becomes ``format`` (``"json"`` or the schema), the
sampling options their ``options`` keys, and a forced tool (Ollama has no ``tool_choice``) is
asked for as structured output with the tool's schema, its JSON answer becoming that tool's
call (:func:`~turngate.providers.request_params.ollama_params`). An HTTP error is classified from the
response itself (status and ``Retry-After``) by a response hook, before the SDK turns it into a
bare ``ResponseError``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import ollama

from turngate.providers.base import ChatMessage, ProviderRequest, StreamChunk, ToolCallChunk, Usage
from turngate.providers.error_classification import classify_exception, classify_status
from turngate.providers.request_params import ollama_params
from turngate.settings import Settings


class OllamaChatProvider:
    name = "ollama"

    def __init__(self, *, host: str, models: tuple[str, ...] = (), timeout_s: float = 60.0) -> None:
        self.models = tuple(models)
        self.host = host
        self._client = ollama.AsyncClient(
            host=host,
            timeout=timeout_s,
            event_hooks={"response": [self._raise_for_status]},
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatProvider:
        if not settings.ollama_host:
            raise ValueError("OLLAMA_HOST is not set")
        return cls(
            host=settings.ollama_host,
            models=settings.ollama_models,
            timeout_s=float(settings.llm_wall_clock_s),
        )

    @property
    def base_url(self) -> str:
        return str(self._client._client.base_url)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        params = ollama_params(request)
        usage = Usage()
        calls: list[ToolCallChunk] = []
        forced: list[str] = []  # a forced tool's arguments, asked for as structured output
        try:
            parts = await self._client.chat(
                model=request.model,
                messages=ollama_messages(request.messages),
                tools=params.tools,
                stream=True,
                format=params.format,
                options=params.options or None,
            )
            try:
                async for part in parts:
                    for call in part.message.tool_calls or ():
                        calls.append(
                            ToolCallChunk(
                                id=f"{self.name}-call-{len(calls) + 1}",
                                name=call.function.name,
                                arguments=json.dumps(dict(call.function.arguments or {})),
                            )
                        )
                    if part.message.content and params.forced_tool is not None:
                        forced.append(part.message.content)
                    elif part.message.content:
                        yield StreamChunk(text=part.message.content)
                    if part.done:
                        usage = Usage(
                            input_tokens=part.prompt_eval_count,
                            output_tokens=part.eval_count,
                        )
            finally:
                await parts.aclose()  # type: ignore[attr-defined]
        except Exception as exc:
            error = classify_exception(exc, vendor=self.name)
            if error is None:
                raise
            raise error from None
        if params.forced_tool is not None and not calls:
            calls.append(
                ToolCallChunk(id=f"{self.name}-call-1", name=params.forced_tool, arguments="".join(forced))
            )
        if calls:
            yield StreamChunk(tool_calls=calls)
        yield StreamChunk(usage=usage)

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]  # unannotated in the SDK

    async def _raise_for_status(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        await response.aread()
        raise classify_status(
            response.status_code,
            vendor=self.name,
            detail=_error_text(response),
            headers=response.headers,
        )


def ollama_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Ollama's message shapes; a tool result names its tool (found by the call id among the
    calls of the assistant messages before it)."""
    names: dict[str, str] = {}
    wire: list[dict[str, Any]] = []
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            names |= {call.id: call.name for call in message.tool_calls}
            entry["tool_calls"] = [
                {"function": {"name": call.name, "arguments": call.parsed_arguments() or {}}}
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None and message.tool_call_id in names:
            entry["tool_name"] = names[message.tool_call_id]
        wire.append(entry)
    return wire


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return response.text
