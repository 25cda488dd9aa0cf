"""OpenAI (and OpenAI-compatible servers) through the official ``openai`` SDK, streaming.

The whole message list goes out in order, system messages included, as Chat Completions
messages. Offered tools go out as ``tools=[{"type": "function", "function": {...}}]`` (nothing
when none are offered); the ``delta.tool_calls`` fragments of choice 0 are joined into complete
calls, emitted once after the text. A tool loop's assistant calls and tool results go out as
``tool_calls`` / ``role: tool`` messages; ``temperature`` when the request has one, and every
request option (structured output, tool choice, ``strict`` tools, sampling) as itself
(:func:`~turngate.providers.request_params.openai_params`). The SDK never
retries (``max_retries=0``): Temporal owns retries, and every failure is classified here into a
:class:`ProviderError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai

from turngate.providers.base import ProviderRequest, ResponseIdOnce, StreamChunk, Usage
from turngate.providers.error_classification import classify_exception
from turngate.providers.request_params import openai_params
from turngate.providers.tool_calls import ToolCallAccumulator, openai_message
from turngate.settings import Settings

NO_KEY = "unused"  # some OpenAI-compatible servers need no key; the SDK insists on one


class OpenAIChatProvider:
    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        models: tuple[str, ...] = (),
        timeout_s: float = 60.0,
    ) -> None:
        self.models = tuple(models)
        self._secrets = tuple(s for s in (api_key,) if s)
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=base_url or None,
            max_retries=0,
            timeout=timeout_s,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIChatProvider:
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        return cls(
            api_key=key,
            base_url=settings.openai_base_url,
            models=settings.openai_models,
            timeout_s=float(settings.llm_wall_clock_s),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        params: dict[str, Any] = {
            "model": request.model,
            "messages": [openai_message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        } | openai_params(request)
        usage = Usage()
        calls = ToolCallAccumulator(self.name)
        response_id = ResponseIdOnce()
        try:
            response = await self._client.chat.completions.create(**params)
            async with response:
                async for chunk in response:
                    response_id.see(chunk.id)
                    if chunk.usage is not None:
                        usage = Usage(
                            input_tokens=chunk.usage.prompt_tokens,
                            output_tokens=chunk.usage.completion_tokens,
                        )
                    for choice in chunk.choices:
                        if choice.index != 0:
                            continue
                        for fragment in choice.delta.tool_calls or ():
                            function = fragment.function
                            calls.start(
                                fragment.index,
                                call_id=fragment.id,
                                name=function.name if function else None,
                            )
                            calls.add_arguments(fragment.index, function.arguments if function else None)
                        if choice.delta.content:
                            yield StreamChunk(text=choice.delta.content, response_id=response_id.take())
        except Exception as exc:
            error = classify_exception(exc, vendor=self.name, secrets=self._secrets)
            if error is None:
                raise
            raise error from None
        if calls:
            yield StreamChunk(tool_calls=calls.complete(), response_id=response_id.take())
        yield StreamChunk(usage=usage)

    async def aclose(self) -> None:
        await self._client.close()
