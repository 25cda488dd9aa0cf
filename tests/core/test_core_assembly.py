"""Prompt assembly: order, roles, token budget trimming by turn, logs, prefix fingerprint."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.core.assembly import Assembly, assemble, chars_div_3
from turngate.core.canonical import canonical_bytes, digest
from turngate.core.context import ContextSettings
from turngate.core.events import EventKind
from turngate.core.refs import resolve_refs

SYSTEM = "You are terse."


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


def conversation(chain, n_turns: int, size: int = 30, settings: ContextSettings | None = None):
    turns = []
    for n in range(1, n_turns + 1):
        turns.append(chain.turn("T", str(n), f"q{n}:" + "u" * size, f"a{n}:" + "a" * size))
    refs = [ev(str(n)) for n in range(1, n_turns + 1)]
    refs += [ev(str(n), "execution") for n in range(1, n_turns + 1)]
    current = chain.intent("T", "now", "current question", parent=str(n_turns), refs=refs)
    resolution = resolve_refs(current, chain.candidates_for(current), settings or ContextSettings())
    return turns, current, resolution


def test_chars_div_3():
    assert [chars_div_3("x" * n) for n in (0, 1, 2, 3, 4, 6, 7)] == [0, 1, 1, 1, 2, 2, 3]


def test_seed_example_1_prompt_gets_intent_execution_and_current(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    current = chain.intent("T", "2", "Explain more", parent="1", refs=[ev("1", "execution"), ev("1")])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    assembly = assemble(SYSTEM, resolution, "Explain more", current=current)
    assert [(m.role, m.content) for m in assembly.messages] == [
        ("system", SYSTEM),
        ("user", "What is 2+2?"),
        ("assistant", "2+2 equals 4"),
        ("user", "Explain more"),
    ]
    assert [(e.item_id, e.item_type, e.source_ref, e.included_reason) for e in assembly.included] == [
        (i1.digest, "user_input", i1.index, "declared_ref"),
        (x1.digest, "memory", x1.index, "declared_ref"),
        (current.digest, "user_input", current.index, "current_intent"),
    ]
    assert assembly.excluded == []
    prefix = [m.model_dump(mode="json") for m in assembly.messages[:-1]]
    assert assembly.prefix_hash == digest(prefix)
    assert assembly.prefix_length == len(canonical_bytes(prefix).decode())


def test_no_system_prompt(new_chain):
    chain = new_chain()
    _, _, resolution = conversation(chain, 1)
    assembly = assemble(None, resolution, "current question")
    assert assembly.messages[0].role == "user"
    assert assembly.included[-1].source_ref == "current_intent"


def test_budget_drops_oldest_pairs_first(new_chain):
    chain = new_chain()
    turns, _, resolution = conversation(chain, 4, size=30)  # 11 tokens per message
    full = assemble(SYSTEM, resolution, "current question")
    assert full.fits and len(full.messages) == 10
    budget = full.estimated_tokens - 1  # one pair too many
    trimmed = assemble(SYSTEM, resolution, "current question", budget_tokens=budget)
    assert trimmed.fits
    assert [m.content[:3] for m in trimmed.messages[1:-1]] == [
        "q2:",
        "a2:",
        "q3:",
        "a3:",
        "q4:",
        "a4:",
    ]
    assert [(e.item_id, e.excluded_reason) for e in trimmed.excluded] == [
        (turns[0][0].digest, "budget_limit"),
        (turns[0][2].digest, "budget_limit"),
    ]
    assert trimmed.messages[0].content == SYSTEM
    assert trimmed.messages[-1].content == "current question"


def test_system_prompt_and_current_message_are_never_trimmed(new_chain):
    chain = new_chain()
    _, _, resolution = conversation(chain, 3)
    huge_system = "s" * 3000
    assembly = assemble(huge_system, resolution, "c" * 300, budget_tokens=50)
    assert [m.role for m in assembly.messages] == ["system", "user"]
    assert assembly.messages[0].content == huge_system
    assert not assembly.fits
    assert assembly.estimated_tokens == 1000 + 100
    assert len(assembly.excluded) == 6
    assert {e.excluded_reason for e in assembly.excluded} == {"budget_limit"}


def test_lone_items_are_their_own_unit(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "first " * 10, "answer 1")
    chain.turn("T", "2", "second", "answer 2")
    current = chain.intent("T", "3", "now", parent="2", refs=[ev("1"), ev("2"), ev("2", "execution")])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    full = assemble(None, resolution, "now")
    trimmed = assemble(None, resolution, "now", budget_tokens=full.estimated_tokens - 1)
    assert [m.content for m in trimmed.messages] == ["second", "answer 2", "now"]
    assert len(trimmed.excluded) == 1


def test_items_without_prompt_content_are_logged(new_chain):
    chain = new_chain()
    _, d1, x1 = chain.turn("T", "1", "hi", "hello")
    current = chain.intent("T", "2", "x", parent="1", refs=[ev("1"), ev(d1.digest), ev("1", "execution")])
    resolution = resolve_refs(
        current,
        chain.candidates_for(current),
        ContextSettings(allow_execution_refs_for_prompt=False),
    )
    assembly = assemble(None, resolution, "x")
    assert [m.content for m in assembly.messages] == ["hi", "x"]
    assert [(e.item_id, e.item_type, e.excluded_reason) for e in assembly.excluded] == [
        (d1.digest, "policy", "no_prompt_content"),
        (x1.digest, "memory", "not_admitted_for_execution"),
    ]


def test_bad_budget_and_estimator_are_refused(new_chain):
    chain = new_chain()
    _, _, resolution = conversation(chain, 1)
    with pytest.raises(ValueError):
        assemble(None, resolution, "x", budget_tokens=0)
    with pytest.raises(ValueError):
        assemble(None, resolution, "x", estimator=lambda text: -1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_turns=st.integers(1, 5),
    size=st.integers(0, 40),
    budget=st.integers(1, 200),
    system=st.one_of(st.none(), st.text(max_size=60)),
)
def test_budget_properties(new_chain, n_turns, size, budget, system):
    chain = new_chain()
    _, current, resolution = conversation(chain, n_turns, size=size)
    first = assemble(system, resolution, "current question", budget_tokens=budget, current=current)
    again = assemble(system, resolution, "current question", budget_tokens=budget, current=current)
    assert isinstance(first, Assembly) and first == again  # deterministic
    if system:
        assert first.messages[0].role == "system" and first.messages[0].content == system
    assert first.messages[-1].content == "current question"
    assert first.estimated_tokens == sum(chars_div_3(m.content) for m in first.messages)
    fixed = chars_div_3("current question") + (chars_div_3(system) if system else 0)
    assert first.fits == (first.estimated_tokens <= budget)
    if fixed <= budget:
        assert first.fits
    # kept turns are the newest ones, as whole pairs
    kept = [e.source_ref for e in first.included if e.included_reason == "declared_ref"]
    dropped = sorted(e.source_ref for e in first.excluded)
    assert all(d < k for d in dropped for k in kept)
    assert len(kept) % 2 == 0 and len(dropped) % 2 == 0
    assert len(kept) + len(dropped) == 2 * n_turns


def test_an_offloaded_answer_is_named_by_pointer_and_counted_whole(new_chain):
    chain = new_chain()
    first = chain.intent("T", "1", "tell me everything")
    chain.decision(first)
    pointer = {"artifact_id": "sha256:" + "a" * 64, "path": "standard/output/aa/" + "a" * 64}
    pointer |= {"sha256": "sha256:" + "a" * 64, "size_bytes": 30_000}
    preview = "p" * 4096
    answer = chain.follow(
        first,
        EventKind.EXECUTION,
        {"output_text": preview, "output_artifact": pointer, "output_truncated": True},
    )
    current = chain.intent("T", "2", "and?", parent="1", refs=[ev("1"), ev("1", "execution")])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    assembly = assemble(None, resolution, "and?")
    assert assembly.message_artifacts == {1: pointer}
    assert assembly.messages[1].content == preview
    # The whole 30,000 bytes count (~10,000 tokens at chars/3: the preview's estimate, scaled),
    # not the 4,096-character preview's 1,366.
    answer_tokens = assembly.estimated_tokens - chars_div_3("tell me everything") - chars_div_3("and?")
    assert 10_000 <= answer_tokens <= 10_010
    trimmed = assemble(None, resolution, "and?", budget_tokens=9_000)
    assert trimmed.message_artifacts == {} and answer.digest in [e.item_id for e in trimmed.excluded]


TOOL = {
    "name": "transition_phase",
    "description": "Move the exercise on once the student has understood.",
    "parameters": {"type": "object", "properties": {"signal": {"type": "string"}}},
}


def test_offered_tool_definitions_count_against_the_budget(new_chain):
    """The budget covers everything sent: with the definitions the same budget trims one more
    pair; at exactly the total with tools nothing is trimmed, one token under it is."""
    chain = new_chain()
    _, _, resolution = conversation(chain, 4, size=30)
    without = assemble(SYSTEM, resolution, "current question")
    with_tools = assemble(SYSTEM, resolution, "current question", tool_definitions=[TOOL])
    tool_tokens = chars_div_3(canonical_bytes([TOOL]).decode())
    assert with_tools.estimated_tokens == without.estimated_tokens + tool_tokens
    at = assemble(
        SYSTEM,
        resolution,
        "current question",
        tool_definitions=[TOOL],
        budget_tokens=with_tools.estimated_tokens,
    )
    assert at.fits and at.excluded == [] and at.messages == with_tools.messages
    under = assemble(
        SYSTEM,
        resolution,
        "current question",
        tool_definitions=[TOOL],
        budget_tokens=with_tools.estimated_tokens - 1,
    )
    assert len(under.excluded) == 2 and under.estimated_tokens <= with_tools.estimated_tokens - 1
    # The same budget without tools keeps every pair: the definitions made the difference.
    same_budget = assemble(
        SYSTEM, resolution, "current question", budget_tokens=with_tools.estimated_tokens - 1
    )
    assert same_budget.excluded == []


def test_tool_definitions_are_never_trimmed(new_chain):
    chain = new_chain()
    _, _, resolution = conversation(chain, 2, size=30)
    assembly = assemble(SYSTEM, resolution, "now", tool_definitions=[TOOL] * 3, budget_tokens=5)
    assert not assembly.fits and len(assembly.messages) == 2  # system + current, every pair trimmed
