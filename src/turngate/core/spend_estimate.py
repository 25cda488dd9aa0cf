"""The input estimate of a budget check: everything the provider is sent, counted before ALLOW.

Rule ``request.utf8/3`` (docs/BUDGETS.md): each message of the request counts
``ceil(UTF-8 bytes of its canonical JSON / 3)`` tokens, each tool definition likewise; a text the
gateway offloaded (the current message over the inline limit, a long referenced message or
answer) counts at its stored size, not its preview. Bytes rather than characters: a character
outside ASCII is 2 to 4 bytes and usually at least one token, so multibyte text is not
undercounted threefold.

The estimate is recorded in two parts so that ``turngate verify`` can recompute what it can:

* ``intent_tokens``: what the INTENT itself sends (the user message or this turn's tool results,
  the client's own messages, the client's tool definitions); recomputed from the INTENT alone.
* ``context_tokens``: what the gateway adds (the prompt pack's system prompt and tools, the
  referenced history, retrieved evidence): the rest of the request as it was assembled.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from turngate.core.assembly import Assembly, client_chat_message
from turngate.core.canonical import canonical_bytes
from turngate.core.client_context import recorded_client_context
from turngate.core.messages import ChatMessage

#: The rule name a spend plan records with its two-part estimate.
ESTIMATE_RULE_REQUEST: Final = "request.utf8/3"
BYTES_PER_TOKEN = 3


def bytes_tokens(size_bytes: int) -> int:
    """``ceil(size_bytes / 3)``."""
    return -(-size_bytes // BYTES_PER_TOKEN)


def message_tokens(message: ChatMessage, whole_bytes: int | None = None) -> int:
    """One message: its canonical JSON (role, content, tool calls), with the content counted at
    ``whole_bytes`` when the message carries a preview of an offloaded text."""
    size = len(canonical_bytes(message.model_dump(mode="json")))
    if whole_bytes is not None:
        size += max(whole_bytes - len(message.content.encode("utf-8")), 0)
    return bytes_tokens(size)


def tool_tokens(definition: Mapping[str, Any]) -> int:
    return bytes_tokens(len(canonical_bytes(dict(definition))))


def request_tokens(
    messages: Sequence[ChatMessage],
    tools: Sequence[Mapping[str, Any]],
    whole_bytes: Mapping[int, int],
) -> int:
    """A request: its messages (``whole_bytes``: position -> stored size of an offloaded text)
    and its tool definitions."""
    return sum(message_tokens(m, whole_bytes.get(i)) for i, m in enumerate(messages)) + sum(
        tool_tokens(t) for t in tools
    )


def _size(pointer: Mapping[str, Any] | None) -> int | None:
    size = pointer.get("size_bytes") if pointer is not None else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _offloaded(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pointer to the whole user message when ingress kept only its preview."""
    pointer = body.get("message_artifact")
    return pointer if body.get("message_truncated") is True and isinstance(pointer, Mapping) else None


def intent_request(
    intent_payload: Mapping[str, Any],
) -> tuple[list[ChatMessage], list[dict[str, Any]], dict[int, int]]:
    """The part of the request an INTENT supplies, as assembly renders it: the client's messages,
    then this turn's tool results as tool messages or else the user message; the client's tools."""
    context = recorded_client_context(intent_payload)
    messages = [client_chat_message(m) for m in context.messages] if context is not None else []
    tools = [tool.spec().definition() for tool in context.tools] if context is not None else []
    whole: dict[int, int] = {}
    if context is not None and context.tool_results:
        messages += [
            ChatMessage(role="tool", content=r.content, tool_call_id=r.tool_call_id)
            for r in context.tool_results
        ]
        return messages, tools, whole
    body = intent_payload.get("payload")
    message = body.get("message") if isinstance(body, Mapping) else None
    size = _size(_offloaded(body) if isinstance(body, Mapping) else None)
    if size is not None:
        whole[len(messages)] = size
    messages.append(ChatMessage(role="user", content=message if isinstance(message, str) else ""))
    return messages, tools, whole


def intent_tokens(intent_payload: Mapping[str, Any]) -> int:
    """The estimate of what the INTENT itself sends (recomputable from the INTENT)."""
    return request_tokens(*intent_request(intent_payload))


def sent_tokens(
    assembly: Assembly, tools: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None
) -> int:
    """The estimate of the whole request as assembled: every message (offloaded history at its
    stored size; ``current``: the pointer of the offloaded current message, which the provider
    call sends whole in place of the last message) and every tool definition offered."""
    whole = {i: s for i, pointer in assembly.message_artifacts.items() if (s := _size(pointer)) is not None}
    last = len(assembly.messages) - 1
    if (size := _size(current)) is not None and last >= 0 and assembly.messages[last].role == "user":
        whole[last] = size
    return request_tokens(assembly.messages, tools, whole)
