"""The OpenAI endpoint in front of Anthropic and Ollama: the official ``openai`` SDK, unmodified,
gets structured output and forced tools from either vendor, and a 400 with the code for what a
vendor cannot honour (recorded, nothing sent to it). Fake vendor servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.fakes import FakeAnthropicServer, FakeOllamaServer
from tests.fakes.llm_servers import fake_anthropic, fake_ollama
from tests.integration.test_openai_compat import ROLES
from tests.security.conftest import make_key
from tests.stack import Stack, make_settings, running_stack

CLAUDE, LLAMA = "claude-test", "llama-test"
FORECAST = {"city": "Vilnius", "degrees": 21}


class Forecast(BaseModel):
    city: str
    degrees: int


class Vendors:
    def __init__(self, stack: Stack, anthropic: FakeAnthropicServer, ollama: FakeOllamaServer, key: str):
        self.stack, self.anthropic, self.ollama, self.key = stack, anthropic, ollama, key

    def sdk(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.stack.http.base_url}/v1", api_key=self.key, max_retries=0)

    async def events(self, correlation_id: str) -> dict[str, dict[str, Any]]:
        snapshot = (await self.stack.http.get("/snapshot", params={"limit": 1000})).json()
        return {e["kind"]: e for e in snapshot["events"] if e["correlation_id"] == correlation_id}


@pytest.fixture(scope="module")
async def vendors(tmp_path_factory: pytest.TempPathFactory, temporal_server: Any) -> AsyncIterator[Vendors]:
    with fake_anthropic(json.dumps(FORECAST)) as anthropic, fake_ollama(json.dumps(FORECAST)) as ollama:
        settings = make_settings(
            tmp_path_factory.mktemp("vendors"),
            temporal_server.address,
            anthropic_api_key="sk-ant-test-0123456789",
            anthropic_base_url=anthropic.base_url,
            anthropic_model_ids=CLAUDE,
            ollama_host=ollama.host,
            ollama_model_ids=LLAMA,
            auth_mode="keys",
        )
        async with running_stack(settings) as stack:
            key = await asyncio.to_thread(make_key, stack.settings, "acme", ROLES)
            stack.http.headers["Authorization"] = f"Bearer {key}"
            yield Vendors(stack, anthropic, ollama, key)


@pytest.mark.parametrize("model", [CLAUDE, LLAMA])
async def test_parse_through_each_vendor(vendors: Vendors, model: str) -> None:
    completion = await vendors.sdk().chat.completions.parse(
        model=model, messages=[{"role": "user", "content": f"Forecast via {model}"}], response_format=Forecast
    )
    assert completion.choices[0].message.parsed == Forecast(**FORECAST)
    if model == CLAUDE:
        fmt = vendors.anthropic.last_request.json["output_config"]["format"]
        assert fmt["type"] == "json_schema" and fmt["schema"]["required"] == ["city", "degrees"]
    else:
        assert vendors.ollama.last_request.json["format"]["required"] == ["city", "degrees"]
    events = await vendors.events(completion.id)
    assert events["EXECUTION"]["payload"]["output_check"]["valid"] is True
    await assert_verifies_thread(vendors, events)


async def test_a_named_tool_on_ollama_is_asked_as_structured_output(vendors: Vendors) -> None:
    tool = {
        "type": "function",
        "function": {"name": "Forecast", "parameters": Forecast.model_json_schema()},
    }
    completion = await vendors.sdk().chat.completions.create(
        model=LLAMA,
        messages=[{"role": "user", "content": "Forecast, as a call"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "Forecast"}},
    )
    (call,) = completion.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("Forecast", FORECAST)
    assert completion.choices[0].finish_reason == "tool_calls"
    events = await vendors.events(completion.id)
    assert client_context_of(events)["request_options"]["tool_choice"] == {
        "mode": "function",
        "name": "Forecast",
    }


async def test_what_a_vendor_cannot_honour_is_a_recorded_400(vendors: Vendors) -> None:
    sent_before = len(vendors.anthropic.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        await vendors.sdk().chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": "seeded"}], seed=7
        )
    assert caught.value.code == "provider.unsupported_parameter" and "seed" in caught.value.message
    assert len(vendors.anthropic.requests) == sent_before  # nothing reached the vendor
    events = await vendors.events(caught.value.response.headers["x-turngate-correlation-id"])
    assert events["EXECUTION"]["payload"]["error"]["code"] == "provider.unsupported_parameter"
    assert client_context_of(events)["request_options"] == {"seed": 7}
    await assert_verifies_thread(vendors, events)


def client_context_of(events: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(events["INTENT"]["payload"]["inputs"]["client_context"])


async def assert_verifies_thread(vendors: Vendors, events: dict[str, dict[str, Any]]) -> None:
    report = (
        await vendors.stack.http.get("/verify", params={"thread_id": events["INTENT"]["thread_id"]})
    ).json()
    assert report["ok"] is True, report
