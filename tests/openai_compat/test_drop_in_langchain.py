"""``langchain-openai``'s ``ChatOpenAI``, unmodified except ``base_url`` and key, with no turngate
header: invoke, stream, ``bind_tools`` (a tool loop) and ``with_structured_output``. Each checks
what the ledger recorded and that the thread verifies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.openai_compat.drop_in import (
    TEXT_ANSWER,
    TOOL_ANSWER,
    DropIn,
    assert_allowed,
    assert_verifies,
    client_context,
    drop_in_stack,
    ledger_length,
    recorded_turns,
)

langchain_openai = pytest.importorskip("langchain_openai")
messages_module = pytest.importorskip("langchain_core.messages")
tools_module = pytest.importorskip("langchain_core.tools")


class GetWeather(BaseModel):
    """Weather for a city."""

    city: str = Field(description="the city")


class Forecast(BaseModel):
    city: str
    degrees: int


@pytest.fixture(scope="module")
async def drop_in(tmp_path_factory: pytest.TempPathFactory, temporal_server: Any) -> AsyncIterator[DropIn]:
    async for stack in drop_in_stack(tmp_path_factory.mktemp("langchain-drop-in"), temporal_server):
        yield stack


@pytest.fixture(autouse=True)
def _fresh_upstream(drop_in: DropIn) -> None:
    drop_in.upstream.reset()


def chat_model(drop_in: DropIn) -> Any:
    return langchain_openai.ChatOpenAI(model="gpt-4o-mini", base_url=drop_in.base_url, api_key=drop_in.key)


async def test_invoke_and_stream(drop_in: DropIn) -> None:
    since = await ledger_length(drop_in)
    llm = chat_model(drop_in)
    answer = await asyncio.to_thread(llm.invoke, "Hello there")
    assert answer.content == TEXT_ANSWER
    pieces = [chunk.content async for chunk in llm.astream("Stream it")]
    assert "".join(pieces) == TEXT_ANSWER
    turns = await recorded_turns(drop_in, since)
    assert len(turns) == 2
    for turn in turns:
        assert_allowed(turn)
        await assert_verifies(drop_in, turn.thread_id)


async def test_bind_tools_runs_a_tool_loop(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"GetWeather": {"city": "Vilnius"}}
    since = await ledger_length(drop_in)
    llm = chat_model(drop_in).bind_tools([GetWeather])
    history: list[Any] = [
        messages_module.SystemMessage("You answer about weather."),
        messages_module.HumanMessage("Weather in Vilnius?"),
    ]
    first = await llm.ainvoke(history)
    (call,) = first.tool_calls
    assert call["name"] == "GetWeather" and call["args"] == {"city": "Vilnius"}
    history += [first, messages_module.ToolMessage("sunny, 21", tool_call_id=call["id"])]
    second = await llm.ainvoke(history)
    assert second.content == TOOL_ANSWER and not second.tool_calls
    turns = await recorded_turns(drop_in, since)
    assert len(turns) == 2 and turns[0].thread_id == turns[1].thread_id
    assert client_context(turns[0])["tools"][0]["name"] == "GetWeather"
    assert client_context(turns[1])["tool_results"] == [{"tool_call_id": call["id"], "content": "sunny, 21"}]
    for turn in turns:
        assert_allowed(turn)
    await assert_verifies(drop_in, turns[0].thread_id)


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
async def test_with_structured_output(drop_in: DropIn, method: str) -> None:
    drop_in.upstream.structured = {"city": "Vilnius", "degrees": 21}
    drop_in.upstream.arguments = {"Forecast": {"city": "Vilnius", "degrees": 21}}
    since = await ledger_length(drop_in)
    structured = chat_model(drop_in).with_structured_output(Forecast, method=method)
    forecast = await structured.ainvoke("Forecast for Vilnius as JSON")
    assert forecast == Forecast(city="Vilnius", degrees=21)
    (turn,) = await recorded_turns(drop_in, since)
    assert_allowed(turn)
    options = client_context(turn)["request_options"]
    if method == "function_calling":  # a forced, named tool
        assert options["tool_choice"] == {"mode": "function", "name": "Forecast"}
    else:
        assert options["response_format"]["type"] == (
            "json_schema" if method == "json_schema" else "json_object"
        )
        assert turn.execution["payload"]["output_check"]["valid"] is True
    await assert_verifies(drop_in, turn.thread_id)
