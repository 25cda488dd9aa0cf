"""The ``system_context`` prompt shape: the context system's "Use in Execution" as written.

The gateway builds one deterministic system message from the resolved context (the system
prompt, then a block with the client's own context messages, the referenced turns in event
order and the admitted external texts) and sends ``[system_context, user_message]``: two
messages, whatever the history. The default shape, ``chat_history``, sends the referenced turns
as chat messages instead (:mod:`turngate.core.assembly`). Which one a turn used is in its
DECISION's context spec (``assembly_rules.prompt_shape``, present for ``system_context`` only).

Tool calls and results render as text lines here (the shape has no tool messages), and a message
the gateway offloaded (over the inline text limit) appears as its preview with the digest of its
whole text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from turngate.core.messages import ChatMessage

PromptShape = Literal["chat_history", "system_context"]
CHAT_HISTORY: PromptShape = "chat_history"
SYSTEM_CONTEXT: PromptShape = "system_context"
CONTEXT_HEADER = "## Context (the references declared for this turn, oldest first)"


def _line(message: ChatMessage) -> str:
    if message.role == "tool":
        return f"[tool result {message.tool_call_id}] {message.content}"
    calls = [
        f"[{message.role} called {call.name}({call.arguments}) as {call.id}]" for call in message.tool_calls
    ]
    said = [f"[{message.role}] {message.content}"] if message.content or not calls else []
    return "\n".join(said + calls)


def _offloaded(line: str, pointer: Mapping[str, Any] | None) -> str:
    if pointer is None:
        return line
    return f"{line} [... cut: the whole text is {pointer.get('sha256')}]"


def system_context_messages(
    system_prompt: str | None,
    context: Sequence[tuple[ChatMessage, Mapping[str, Any] | None]],
    external_text: str | None,
    current: Sequence[ChatMessage],
) -> list[ChatMessage]:
    """``[system_context, user_message]``: ``context`` is the history in the order the chat shape
    sends it (each message with the pointer of its offloaded whole text, if any), ``current`` the
    turn's own input (a user message, or the tool results it answers with)."""
    lines = [_offloaded(_line(message), pointer) for message, pointer in context]
    block = "\n".join([CONTEXT_HEADER, *lines]) if lines else ""
    system = "\n\n".join(part for part in (system_prompt, block, external_text) if part)
    if len(current) == 1 and current[0].role == "user":
        user = current[0]
    else:
        user = ChatMessage(role="user", content="\n".join(_line(message) for message in current))
    return ([ChatMessage(role="system", content=system)] if system else []) + [user]
