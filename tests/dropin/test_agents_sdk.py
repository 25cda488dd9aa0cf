"""openai-agents, unmodified but for its OpenAI client (base_url and key), with its default
model: the Responses API, through ``/v1/responses``. The agent calls a tool, gets its result and
answers; the run is two turns of one thread, with no thread header.

One stack per module; the provider is a fake OpenAI server on 127.0.0.1 (tests/dropin/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from tests.dropin.conftest import REPLY, WEATHER_CALL, ToolLoopOpenAI, turn_events, verified
from tests.dropin.test_responses_sdk import client
from tests.stack import Stack

agents = pytest.importorskip("agents", reason="openai-agents is a dev dependency")

asked: list[str] = []


@agents.function_tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    asked.append(city)
    return f"sunny in {city}"


def run_config(stack: Stack) -> Any:
    # The default provider speaks the Responses API; tracing would export to OpenAI: off.
    provider = agents.OpenAIProvider(openai_client=client(stack))
    return agents.RunConfig(model_provider=provider, tracing_disabled=True)


def weather_agent(**kw: Any) -> Any:
    return agents.Agent(
        name="weather", instructions="Answer briefly.", tools=[get_weather], model="gpt-4o-mini", **kw
    )


async def _check_two_turns(stack: Stack, first_id: str, second_id: str) -> None:
    firsts, seconds = await turn_events(stack, first_id), await turn_events(stack, second_id)
    assert firsts["EXECUTION"]["payload"]["tool_calls"][0]["name"] == "get_weather"
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    intent = seconds["INTENT"]["payload"]
    assert [r["ref_id"] for r in intent["declared_refs"]] == [
        firsts["INTENT"]["digest"],
        firsts["EXECUTION"]["digest"],
    ]
    assert intent["inputs"]["client_context"]["tool_results"] == [
        {"tool_call_id": "call_w1", "content": "sunny in Vilnius"}
    ]
    assert seconds["EXECUTION"]["payload"]["output_text"] == REPLY
    for events in (firsts, seconds):
        assert events["DECISION"]["payload"]["decision"] == "ALLOW"
        assert events["DECISION"]["payload"]["context_digest"]
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_an_agent_runs_a_tool_loop(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    asked.clear()
    result = await agents.Runner.run(weather_agent(), "Weather in Vilnius?", run_config=run_config(stack))
    assert result.final_output == REPLY
    assert asked == ["Vilnius"]
    first, second = (response.response_id for response in result.raw_responses)
    assert first is not None and second is not None
    await _check_two_turns(stack, first, second)


async def test_a_streamed_agent_run(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    asked.clear()
    result = agents.Runner.run_streamed(weather_agent(), "Weather in Vilnius?", run_config=run_config(stack))
    kinds = {event.type async for event in result.stream_events()}
    assert result.final_output == REPLY and asked == ["Vilnius"]
    assert "raw_response_event" in kinds
    first, second = (response.response_id for response in result.raw_responses)
    assert first is not None and second is not None
    await _check_two_turns(stack, first, second)


class Forecast(BaseModel):
    city: str
    sky: str


async def test_an_agent_with_an_output_type(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.reply = Forecast(city="Riga", sky="cloudy").model_dump_json()
    agent = agents.Agent(
        name="forecast", instructions="Answer in JSON.", output_type=Forecast, model="gpt-4o-mini"
    )
    result = await agents.Runner.run(agent, "Forecast for Riga?", run_config=run_config(stack))
    assert result.final_output == Forecast(city="Riga", sky="cloudy")
    events = await turn_events(stack, str(result.raw_responses[0].response_id))
    await verified(stack, events["INTENT"]["thread_id"])


async def test_an_agent_chaining_responses_by_id(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """With ``auto_previous_response_id`` the SDK sends only the new items and the previous
    response's id: the second turn continues the first one's thread with its history."""
    upstream.loop_calls = [WEATHER_CALL]
    asked.clear()
    result = await agents.Runner.run(
        weather_agent(), "Weather in Vilnius?", run_config=run_config(stack), auto_previous_response_id=True
    )
    assert result.final_output == REPLY and asked == ["Vilnius"]
    first, second = (response.response_id for response in result.raw_responses)
    assert first is not None and second is not None
    sent = upstream.last_request.json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    await _check_two_turns(stack, first, second)
    assert (await turn_events(stack, second))["INTENT"]["parent_turn_id"] == first
