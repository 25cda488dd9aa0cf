"""The loop guard: a tool loop that keeps making the same call is stopped.

A model in a tool loop can ask for the same tool with the same arguments again and again (the
result did not help, so it asks once more). Each turn of such a loop is a paid provider call that
repeats the last one. Before a turn is sent, its request is checked: when one tool call (same
name, same arguments as canonical JSON) appears more than ``max_repeats`` times in the
conversation being sent, the turn is denied (``loop_guard.repeated_tool_call``, a fault: its
request is snapshotted). ``max_repeats`` is the context config's
``context.loop_guard_max_repeats`` (0 turns the guard off). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from turngate.core.canonical import canonical_bytes, digest
from turngate.core.messages import ChatMessage

#: The reason code of a turn the loop guard stopped.
LOOP_GUARD = "loop_guard.repeated_tool_call"
#: The default threshold: a call may appear three times; the fourth identical one is denied.
DEFAULT_MAX_REPEATS = 3


def _arguments_key(arguments: str) -> str:
    """Canonical JSON of the arguments (key order and spacing do not make a call new); the text
    itself when it is not JSON."""
    try:
        return canonical_bytes(json.loads(arguments or "{}")).decode()
    except ValueError:
        return arguments


def repeated_tool_call(messages: Sequence[ChatMessage], max_repeats: int) -> dict[str, Any] | None:
    """The most repeated tool call of ``messages`` when it appears more than ``max_repeats``
    times: ``{tool, arguments_digest, repeats, max_repeats}`` (the error the DENY records);
    None when no call does, or ``max_repeats`` is 0."""
    if max_repeats <= 0:
        return None
    counts: Counter[tuple[str, str]] = Counter(
        (call.name, _arguments_key(call.arguments)) for message in messages for call in message.tool_calls
    )
    if not counts:
        return None
    (name, arguments), repeats = counts.most_common(1)[0]
    if repeats <= max_repeats:
        return None
    return {
        "code": LOOP_GUARD,
        "detail": f"the tool call {name!r} with the same arguments was made {repeats} times "
        f"(at most {max_repeats}); the loop is stopped",
        "tool": name,
        "arguments_digest": digest(arguments),
        "repeats": repeats,
        "max_repeats": max_repeats,
    }
