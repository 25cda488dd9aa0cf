"""The two prompt shapes: `chat_history` (the referenced turns as chat messages, the default) and
`system_context` (the context system's "Use in Execution": one system block built from the
resolved refs, then the user message). Same content, same trimming, same logs; the shape is a
context config option that enters the config digest and the context spec only when not the
default."""

from __future__ import annotations

import pytest
from tests.core.test_core_assembly import SYSTEM, conversation, ev
from tests.core.test_core_external import chunk

from turngate.core.assembly import assemble
from turngate.core.client_context import ClientToolResult
from turngate.core.context import (
    ENV_PROMPT_SHAPE,
    ContextConfig,
    ContextConfigError,
    ContextSettings,
    build_context,
    context_config_digest,
    load_context_config,
)
from turngate.core.events import EventKind
from turngate.core.refs import resolve_refs
from turngate.core.system_context import CONTEXT_HEADER

SYSTEM_CONTEXT = ContextConfig(context=ContextSettings(prompt_shape="system_context"))


def example_1(new_chain):
    """The context system's Example 1: INTENT-1, EXECUTION-1, then "Explain more"."""
    chain = new_chain()
    chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    current = chain.intent("T", "2", "Explain more", parent="1", refs=[ev("1"), ev("1", "execution")])
    return chain, current, resolve_refs(current, chain.candidates_for(current), ContextSettings())


def test_example_1_in_both_shapes(new_chain):
    _, current, resolution = example_1(new_chain)
    chat = assemble(SYSTEM, resolution, "Explain more", current=current)
    block = assemble(SYSTEM, resolution, "Explain more", current=current, shape="system_context")
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", SYSTEM),
        ("user", "What is 2+2?"),
        ("assistant", "2+2 equals 4"),
        ("user", "Explain more"),
    ]
    assert [(m.role, m.content) for m in block.messages] == [
        ("system", f"{SYSTEM}\n\n{CONTEXT_HEADER}\n[user] What is 2+2?\n[assistant] 2+2 equals 4"),
        ("user", "Explain more"),
    ]
    # The same items in and out, the same count (the block's framing aside).
    assert block.included == chat.included and block.excluded == chat.excluded
    assert block.prefix_hash != chat.prefix_hash
    # Deterministic: equal inputs, equal bytes.
    again = assemble(SYSTEM, resolution, "Explain more", current=current, shape="system_context")
    assert again == block


def test_without_a_system_prompt_or_refs(new_chain):
    chain = new_chain()
    first = chain.intent("T", "1", "hello")
    resolution = resolve_refs(
        first, chain.candidates_for(first), ContextSettings(empty_refs_policy="ALLOW_EMPTY")
    )
    alone = assemble(None, resolution, "hello", shape="system_context")
    assert [(m.role, m.content) for m in alone.messages] == [("user", "hello")]
    _, _, refs = example_1(new_chain)
    only_context = assemble(None, refs, "Explain more", shape="system_context")
    assert [m.role for m in only_context.messages] == ["system", "user"]
    assert only_context.messages[0].content.startswith(CONTEXT_HEADER)


def test_trimming_and_external_texts_are_shared(new_chain):
    chain = new_chain()
    _, _, resolution = conversation(chain, 4, size=30)
    external = [chunk(1, "the lighthouse keeper"), chunk(2, "the fog horn")]
    full = assemble(SYSTEM, resolution, "current question", external=external)
    budget = full.estimated_tokens - 1  # one turn too many
    chat = assemble(SYSTEM, resolution, "current question", external=external, budget_tokens=budget)
    block = assemble(
        SYSTEM,
        resolution,
        "current question",
        external=external,
        budget_tokens=budget,
        shape="system_context",
    )
    assert block.excluded == chat.excluded and block.estimated_tokens == chat.estimated_tokens
    [system, user] = block.messages
    assert user.content == "current question"
    assert "q1:" not in system.content and "[user] q2:" in system.content  # the oldest turn went
    assert system.content.index("[assistant] a4:") < system.content.index("[1] case c1, chunk 1")


def test_tool_results_are_text_in_the_user_message(new_chain):
    _, current, resolution = example_1(new_chain)
    results = [ClientToolResult(tool_call_id="call_1", content="4")]
    block = assemble(
        None,
        resolution,
        "",
        tool_results=results,
        tool_messages=True,
        shape="system_context",
        current=current,
    )
    assert [(m.role, m.content) for m in block.messages][-1] == ("user", "[tool result call_1] 4")
    assert all(m.role in {"system", "user"} for m in block.messages)


def test_an_offloaded_answer_is_its_preview_in_the_block(new_chain):
    chain = new_chain()
    first = chain.intent("T", "1", "tell me everything")
    chain.decision(first)
    pointer = {
        "artifact_id": "sha256:" + "a" * 64,
        "path": "x",
        "sha256": "sha256:" + "a" * 64,
        "size_bytes": 9000,
    }
    chain.follow(
        first,
        EventKind.EXECUTION,
        {"output_text": "p" * 100, "output_artifact": pointer, "output_truncated": True},
    )
    current = chain.intent("T", "2", "and?", parent="1", refs=[ev("1"), ev("1", "execution")])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    block = assemble(None, resolution, "and?", shape="system_context")
    assert block.message_artifacts == {}
    assert "[... cut: the whole text is sha256:" + "a" * 64 + "]" in block.messages[0].content


def test_the_shape_is_in_the_config_digest_and_the_spec_only_when_not_the_default(new_chain, monkeypatch):
    default = ContextConfig()
    explicit = ContextConfig(context=ContextSettings(prompt_shape="chat_history"))
    assert "prompt_shape" not in default.effective()["context"]
    assert context_config_digest(explicit) == context_config_digest(default)
    assert context_config_digest(SYSTEM_CONTEXT) != context_config_digest(default)

    chain, current, _ = example_1(new_chain)
    chat = build_context(current, chain.candidates_for(current), default)
    block = build_context(current, chain.candidates_for(current), SYSTEM_CONTEXT)
    assert "prompt_shape" not in chat.context_spec["assembly_rules"]
    assert block.context_spec["assembly_rules"]["prompt_shape"] == "system_context"
    assert block.context_digest != chat.context_digest

    assert (
        load_context_config(None, {ENV_PROMPT_SHAPE: "system_context"}).context.prompt_shape
        == "system_context"
    )
    with pytest.raises(ContextConfigError, match=ENV_PROMPT_SHAPE):
        load_context_config(None, {ENV_PROMPT_SHAPE: "both"})
