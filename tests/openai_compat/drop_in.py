"""The harness of the drop-in tests: one turngate stack per module (real Temporal dev server,
worker and API in process, API keys on) in front of a fake OpenAI upstream on 127.0.0.1 that
answers like a model would: it streams, calls the tool a request forces or offers, answers a
tool result with text, and answers a ``response_format`` with JSON.

Each framework test uses its library unmodified except for ``base_url`` and the key, sends no
turngate header, and then checks what the ledger recorded (:func:`recorded_turns`) and that the
thread verifies (:func:`assert_verifies`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tests.fakes.llm_servers import FakeOpenAIServer, RecordedRequest
from tests.integration.test_openai_compat import ROLES, fake_settings
from tests.security.conftest import make_key
from tests.stack import Stack, running_stack

TOOL_ANSWER = "It is sunny and 21 degrees in Vilnius."
TEXT_ANSWER = "Hello from the scripted model."


class ScriptedOpenAI(FakeOpenAIServer):
    """A fake OpenAI upstream whose answer depends on the request, as a model's would:

    - a ``json_schema`` / ``json_object`` response format: :attr:`structured` as JSON text;
    - tools offered and a forced ``tool_choice`` (a name, or ``required``: the first tool), or
      tools offered and the last message a user's: a call of that tool with
      :attr:`arguments` [name] (``{}`` when unset);
    - otherwise text: :data:`TOOL_ANSWER` after a tool result, else :data:`TEXT_ANSWER`.
    """

    def __init__(self) -> None:
        super().__init__(TEXT_ANSWER)
        self.structured: dict[str, Any] = {}
        self.arguments: dict[str, dict[str, Any]] = {}

    def reset(self) -> None:
        super().reset()
        self.reply = TEXT_ANSWER
        self.structured = {}
        self.arguments = {}

    def _respond(self, handler: Any, request: RecordedRequest, stream_error: Any) -> None:
        body = request.json
        tools = [tool["function"]["name"] for tool in body.get("tools") or []]
        choice = body.get("tool_choice")
        last = (body.get("messages") or [{}])[-1].get("role")
        forced = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if choice == "required" and tools:
            forced = tools[0]
        fmt = (body.get("response_format") or {}).get("type")
        self.tool_calls = []
        if forced or (tools and last == "user" and fmt not in ("json_schema", "json_object")):
            name = forced or tools[0]
            self.tool_calls = [{"name": name, "arguments": self.arguments.get(name, {})}]
            self.reply = ""
        elif fmt in ("json_schema", "json_object"):
            self.reply = json.dumps(self.structured)
        else:
            self.reply = TOOL_ANSWER if last == "tool" else TEXT_ANSWER
        super()._respond(handler, request, stream_error)


@dataclass
class DropIn:
    stack: Stack
    upstream: ScriptedOpenAI
    key: str

    @property
    def base_url(self) -> str:
        return f"{self.stack.http.base_url}/v1"


@dataclass(frozen=True)
class Turn:
    correlation_id: str
    thread_id: str
    intent: dict[str, Any]
    decision: dict[str, Any]
    execution: dict[str, Any]


async def drop_in_stack(tmp_path: Any, temporal_server: Any, **settings: Any) -> AsyncIterator[DropIn]:
    """A stack with a tenant's key in front of a :class:`ScriptedOpenAI` (use as a module fixture)."""
    upstream = ScriptedOpenAI().start()
    upstream.delay_s = 0.0
    try:
        config = fake_settings(tmp_path, temporal_server, upstream, **settings)
        async with running_stack(config.model_copy(update={"auth_mode": "keys"})) as stack:
            key = await asyncio.to_thread(make_key, stack.settings, "acme", ROLES)
            stack.http.headers["Authorization"] = f"Bearer {key}"
            yield DropIn(stack=stack, upstream=upstream, key=key)
    finally:
        upstream.stop()


async def recorded_turns(drop_in: DropIn, since: int = 0) -> list[Turn]:
    """Every turn the ledger recorded after event index ``since``, in order."""
    snapshot = (await drop_in.stack.http.get("/snapshot", params={"limit": 1000})).json()
    by_turn: dict[str, dict[str, dict[str, Any]]] = {}
    for event in snapshot["events"]:
        if event["index"] >= since:
            by_turn.setdefault(event["correlation_id"], {})[event["kind"]] = event
    return [
        Turn(
            correlation_id=cid,
            thread_id=events["INTENT"]["thread_id"],
            intent=events["INTENT"],
            decision=events["DECISION"],
            execution=events["EXECUTION"],
        )
        for cid, events in by_turn.items()
        if {"INTENT", "DECISION", "EXECUTION"} <= set(events)
    ]


async def ledger_length(drop_in: DropIn) -> int:
    return int((await drop_in.stack.http.get("/snapshot", params={"limit": 1})).json()["length"])


async def assert_verifies(drop_in: DropIn, thread_id: str) -> None:
    report = (await drop_in.stack.http.get("/verify", params={"thread_id": thread_id})).json()
    assert report["ok"] is True, report


def assert_allowed(turn: Turn) -> None:
    assert turn.decision["payload"]["decision"] == "ALLOW"
    assert not turn.execution["payload"].get("error"), turn.execution["payload"]


def client_context(turn: Turn) -> dict[str, Any]:
    return dict(turn.intent["payload"]["inputs"].get("client_context") or {})
