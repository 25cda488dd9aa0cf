"""Agent frameworks on the Chat Completions API, unmodified except ``base_url`` and key, with no
turngate header: the OpenAI Agents SDK (``OpenAIChatCompletionsModel``: a tool loop, and
``output_type``) and pydantic-ai (``OpenAIChatModel``: its default tool output, and a tool loop).
Each checks what the ledger recorded and that the thread verifies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.openai_compat.drop_in import (
    TOOL_ANSWER,
    DropIn,
    assert_allowed,
    assert_verifies,
    client_context,
    drop_in_stack,
    ledger_length,
    recorded_turns,
)

agents = pytest.importorskip("agents")
pydantic_ai = pytest.importorskip("pydantic_ai")
pydantic_ai_openai = pytest.importorskip("pydantic_ai.models.openai")
pydantic_ai_providers = pytest.importorskip("pydantic_ai.providers.openai")


class Forecast(BaseModel):
    city: str
    degrees: int


FORECAST = {"city": "Vilnius", "degrees": 21}


@pytest.fixture(scope="module")
async def drop_in(tmp_path_factory: pytest.TempPathFactory, temporal_server: Any) -> AsyncIterator[DropIn]:
    agents.set_tracing_disabled(True)  # the trace exporter would call api.openai.com
    async for stack in drop_in_stack(tmp_path_factory.mktemp("agents-drop-in"), temporal_server):
        yield stack


@pytest.fixture(autouse=True)
def _fresh_upstream(drop_in: DropIn) -> None:
    drop_in.upstream.reset()


def openai_client(drop_in: DropIn) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=drop_in.base_url, api_key=drop_in.key)


# ------------------------------------------------------------------ OpenAI Agents SDK


@agents.function_tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny, 21 in {city}"


def agents_model(drop_in: DropIn) -> Any:
    return agents.OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=openai_client(drop_in))


async def test_openai_agents_tool_loop_on_chat_completions(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"get_weather": {"city": "Vilnius"}}
    since = await ledger_length(drop_in)
    agent = agents.Agent(
        name="weather", instructions="Answer about weather.", tools=[get_weather], model=agents_model(drop_in)
    )
    result = await agents.Runner.run(agent, "Weather in Vilnius?")
    assert result.final_output == TOOL_ANSWER
    turns = await recorded_turns(drop_in, since)
    assert len(turns) == 2 and turns[0].thread_id == turns[1].thread_id
    assert client_context(turns[0])["tools"][0]["name"] == "get_weather"
    (result_sent,) = client_context(turns[1])["tool_results"]
    assert result_sent["content"] == "sunny, 21 in Vilnius"
    for turn in turns:
        assert_allowed(turn)
    await assert_verifies(drop_in, turns[0].thread_id)


async def test_openai_agents_output_type(drop_in: DropIn) -> None:
    drop_in.upstream.structured = FORECAST
    since = await ledger_length(drop_in)
    agent = agents.Agent(name="forecaster", output_type=Forecast, model=agents_model(drop_in))
    result = await agents.Runner.run(agent, "Forecast for Vilnius")
    assert result.final_output == Forecast(**FORECAST)
    (turn,) = await recorded_turns(drop_in, since)
    assert client_context(turn)["request_options"]["response_format"]["type"] == "json_schema"
    assert turn.execution["payload"]["output_check"]["valid"] is True
    await assert_verifies(drop_in, turn.thread_id)


# ------------------------------------------------------------------ pydantic-ai


def pydantic_ai_model(drop_in: DropIn) -> Any:
    provider = pydantic_ai_providers.OpenAIProvider(base_url=drop_in.base_url, api_key=drop_in.key)
    return pydantic_ai_openai.OpenAIChatModel("gpt-4o-mini", provider=provider)


async def test_pydantic_ai_default_output_is_a_forced_tool(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"final_result": FORECAST}
    since = await ledger_length(drop_in)
    agent = pydantic_ai.Agent(pydantic_ai_model(drop_in), output_type=Forecast)
    result = await agent.run("Forecast for Vilnius")
    assert result.output == Forecast(**FORECAST)
    (turn,) = await recorded_turns(drop_in, since)
    assert client_context(turn)["request_options"]["tool_choice"] == {"mode": "required"}
    assert_allowed(turn)
    await assert_verifies(drop_in, turn.thread_id)


async def test_pydantic_ai_tool_loop(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"weather": {"city": "Vilnius"}}
    since = await ledger_length(drop_in)
    agent = pydantic_ai.Agent(pydantic_ai_model(drop_in), instructions="Answer about weather.")

    @agent.tool_plain
    def weather(city: str) -> str:
        """Weather for a city."""
        return f"sunny, 21 in {city}"

    result = await agent.run("Weather in Vilnius?")
    assert result.output == TOOL_ANSWER
    turns = await recorded_turns(drop_in, since)
    assert len(turns) == 2 and turns[0].thread_id == turns[1].thread_id
    for turn in turns:
        assert_allowed(turn)
    await assert_verifies(drop_in, turns[0].thread_id)
