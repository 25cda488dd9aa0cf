"""Reference resolution (the context system): lookup rules, errors, normalization, canonical order."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.core.context import ContextSettings
from turngate.core.events import DeclaredRef, EventKind
from turngate.core.refs import (
    CROSS_THREAD_REF,
    EMPTY_REFS_DENIED,
    MAX_REFS_EXCEEDED,
    REF_INVALID,
    REF_NOT_FOUND,
    RefResolutionError,
    ref_lookup_ids,
    resolve_refs,
)

DEFAULT = ContextSettings()


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


def resolve(chain, intent, settings=DEFAULT):
    return resolve_refs(intent, chain.candidates_for(intent), settings)


def test_seed_example_1_chat_history(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    i2 = chain.intent("T", "2", "Explain more", parent="1", refs=[ev("c-T-1"), ev("1", "execution")])

    res = resolve(chain, i2)

    assert [(r.event_digest, r.admitted_for) for r in res.resolved_refs] == [
        (i1.digest, "governance"),
        (x1.digest, "execution_only"),
    ]
    assert [e.digest for e in res.governance_events] == [i1.digest]
    assert [e.digest for e in res.execution_events] == [x1.digest]
    assert res.normative_input_digests == (i1.digest,)
    assert res.applied_rules == (
        "SCOPE_BOUND",
        "DEDUPE_REFS",
        "FILTER_INTENT_ONLY",
        "SORT_CANONICAL",
    )


def test_lookup_by_turn_id_correlation_id_and_digest(new_chain):
    chain = new_chain()
    i1, d1, x1 = chain.turn("T", "1", "hi", correlation="corr-1")
    i2 = chain.intent(
        "T",
        "2",
        "next",
        parent="1",
        refs=[
            ev("corr-1"),
            ev("1"),
            ev(x1.digest),
            ev(d1.digest, "execution"),
            ev("corr-1", "execution"),
        ],
    )
    res = resolve(chain, i2)
    kinds = [(r.event_index, r.event_kind, r.admitted_for) for r in res.resolved_refs]
    assert kinds == [
        (i1.index, "INTENT", "governance"),
        (d1.index, "DECISION", "execution_only"),
        (x1.index, "EXECUTION", "execution_only"),
    ]
    # a DECISION ref is audit trail only: neither governance nor prompt material
    assert [e.kind for e in res.execution_events] == [EventKind.EXECUTION]


def test_digest_ref_of_an_intent_is_governance_whatever_the_ref_type(new_chain):
    chain = new_chain()
    i1, _, _ = chain.turn("T", "1", "hi")
    i2 = chain.intent("T", "2", "x", parent="1", refs=[ev(i1.digest, "execution")])
    assert resolve(chain, i2).resolved_refs[0].admitted_for == "governance"


def test_canonical_order_and_dedupe_ignore_client_order(new_chain):
    chain = new_chain()
    turns = [chain.turn("T", str(n), f"m{n}") for n in range(1, 5)]
    refs = [ev("3"), ev("c-T-1"), ev("1"), ev(turns[1][0].digest), ev("3", "execution")]
    results = []
    for seed in range(6):
        shuffled = refs[:]
        random.Random(seed).shuffle(shuffled)
        intent = chain.intent("T", f"q{seed}", "q", parent="4", refs=shuffled)
        results.append(resolve(chain, intent))
    first = results[0]
    assert all(r.resolved_refs == first.resolved_refs for r in results)
    indexes = [r.event_index for r in first.resolved_refs]
    assert indexes == sorted(indexes)
    assert len(first.resolved_refs) == 4  # "c-T-1" and "1" name the same INTENT
    intent_1 = next(r for r in first.resolved_refs if r.event_digest == turns[0][0].digest)
    assert (intent_1.ref_type, intent_1.ref_id) == ("event", "1")  # smallest (type, id) names it


def test_ref_not_found(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("nope")])
    with pytest.raises(RefResolutionError) as err:
        resolve(chain, intent)
    assert (err.value.code, err.value.ref_id) == (REF_NOT_FOUND, "nope")


def test_execution_ref_to_a_turn_without_execution_is_not_found(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "hi", output=None)  # DENYed turn: INTENT + DECISION only
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("1", "execution")])
    with pytest.raises(RefResolutionError) as err:
        resolve(chain, intent)
    assert err.value.code == REF_NOT_FOUND


def test_refs_only_point_to_earlier_events(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "self", parent="1", refs=[ev("2")])
    later = chain.execution(intent, "later output")
    with pytest.raises(RefResolutionError) as err:
        resolve_refs(intent, [intent, later], DEFAULT)
    assert err.value.code == REF_NOT_FOUND


def test_a_ref_to_a_turn_recorded_after_the_intent_is_not_found(new_chain):
    """Two turns in flight in one thread: the first names the second, whose INTENT (and even
    EXECUTION) came later. Handed every event of the thread, resolution still refuses it."""
    chain = new_chain()
    chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("3"), ev("3", "execution")])
    later = chain.turn("T", "3", "later", parent="1", refs=[ev("1")])
    for refs in ([ev("3")], [ev("3", "execution")], [{"ref_id": later[0].digest}]):
        current = intent.model_copy(update={"payload": {**intent.payload, "declared_refs": refs}})
        with pytest.raises(RefResolutionError) as err:
            resolve_refs(current, [*chain.events[:3], *later[:2], later[2]], DEFAULT)
        assert err.value.code == REF_NOT_FOUND, refs


def test_cross_thread_ref_to_an_event_that_exists_elsewhere(new_chain):
    chain = new_chain()
    other, _, _ = chain.turn("OTHER", "o1", "secret", correlation="corr-other")
    chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("corr-other")])
    candidates = chain.candidates_for(intent)
    assert [c.digest for c in candidates] == [other.digest]  # it really exists
    with pytest.raises(RefResolutionError) as err:
        resolve_refs(intent, candidates, DEFAULT)
    assert (err.value.code, err.value.ref_id) == (CROSS_THREAD_REF, "corr-other")
    assert "OTHER" not in err.value.detail  # the other thread's id is not disclosed

    loose = ContextSettings(enforce_scope_bound=False)
    res = resolve_refs(intent, candidates, loose)
    assert res.normative_input_digests == (other.digest,)
    assert "SCOPE_BOUND" not in res.applied_rules


def test_in_thread_match_wins_over_other_threads(new_chain):
    chain = new_chain()
    chain.turn("OTHER", "1", "elsewhere")
    mine, _, _ = chain.turn("T", "1", "mine")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("1")])
    all_events = chain.events[: intent.index]
    res = resolve_refs(intent, all_events, DEFAULT)
    assert res.normative_input_digests == (mine.digest,)


def test_max_refs_exceeded(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("1")] * 3)
    with pytest.raises(RefResolutionError) as err:
        resolve(chain, intent, ContextSettings(max_refs=2))
    assert err.value.code == MAX_REFS_EXCEEDED
    assert len(resolve(chain, intent, ContextSettings(max_refs=3)).resolved_refs) == 1


def test_empty_refs_denied_only_when_continuing_a_thread(new_chain):
    chain = new_chain()
    first = chain.intent("T", "1", "hello")  # first turn: no parent, no refs
    assert resolve(chain, first).resolved_refs == ()
    follow_up = chain.intent("T", "2", "again", parent="1")
    with pytest.raises(RefResolutionError) as err:
        resolve(chain, follow_up)
    assert err.value.code == EMPTY_REFS_DENIED
    allowed = resolve(chain, follow_up, ContextSettings(empty_refs_policy="ALLOW_EMPTY"))
    assert allowed.resolved_refs == ()


@pytest.mark.parametrize(
    "refs",
    [
        [{"ref_type": "blob.store", "ref_id": "h1"}],
        [{"ref_type": "event"}],
        [{"ref_type": "event", "ref_id": 7}],
        ["c-T-1"],
    ],
)
def test_malformed_or_unsupported_refs_are_ref_invalid(new_chain, refs):
    chain = new_chain()
    chain.turn("T", "1", "hi")
    draft = chain.intent("T", "2", "x", parent="1").model_copy()
    intent = draft.model_copy(update={"payload": {**draft.payload, "declared_refs": refs}})
    with pytest.raises(RefResolutionError) as err:
        resolve_refs(intent, chain.events, DEFAULT)
    assert err.value.code == REF_INVALID


def test_execution_refs_dropped_with_a_note_when_disallowed(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "hi")
    intent = chain.intent("T", "2", "x", parent="1", refs=[ev("1"), ev("1", "execution")])
    res = resolve(chain, intent, ContextSettings(allow_execution_refs_for_prompt=False))
    assert [r.event_digest for r in res.resolved_refs] == [i1.digest]
    assert res.execution_events == ()
    assert [(d.event_digest, d.rule) for d in res.dropped_refs] == [(x1.digest, "DROP_EXECUTION_REFS")]
    assert "DROP_EXECUTION_REFS" in res.applied_rules


def test_ref_lookup_ids_distinct_in_declaration_order():
    refs = [
        DeclaredRef(ref_id="b"),
        {"ref_type": "execution", "ref_id": "a"},
        {"ref_id": " b "},
        {"ref_id": ""},
        "junk",
        {"ref_id": "c"},
    ]
    assert ref_lookup_ids(refs) == ["b", "a", "c"]


@st.composite
def ledgers(draw):
    """A few threads with random turns, then one intent in thread T referencing its turns."""
    threads = ["T", "U"]
    plan = draw(
        st.lists(
            st.tuples(st.sampled_from(threads), st.booleans(), st.booleans()),
            min_size=1,
            max_size=10,
        )
    )
    picks = draw(st.lists(st.integers(0, 40), min_size=1, max_size=8))
    kinds = draw(st.lists(st.sampled_from(["event", "execution", "digest"]), min_size=8, max_size=8))
    seed = draw(st.integers(0, 1000))
    turn_refs = draw(st.booleans())  # context spec version 3 (EXPAND_TURN_REFS) or earlier
    return plan, picks, kinds, seed, turn_refs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers())
def test_resolution_is_order_free_and_needs_only_the_candidates(new_chain, data):
    plan, picks, kinds, seed, turn_refs = data
    chain = new_chain()
    turns = []
    for n, (thread, decided, executed) in enumerate(plan):
        intent = chain.intent(thread, f"t{n}", f"message {n}")
        if decided:
            chain.decision(intent)
        if executed:
            chain.execution(intent, f"output {n}")
        turns.append(intent)
    mine = [t for t in turns if t.thread_id == "T"] or turns
    refs = []
    for pick, kind in zip(picks, kinds, strict=False):
        target = mine[pick % len(mine)]
        if kind == "digest":
            refs.append(ev(target.digest))
        else:
            refs.append(ev(target.turn_id, kind))
    intent = chain.intent("T", "now", "current", parent="t0", refs=refs)

    def outcome(candidates, declared):
        shuffled = intent.model_copy(update={"payload": {**intent.payload, "declared_refs": declared}})
        try:
            return resolve_refs(shuffled, candidates, DEFAULT, turn_refs=turn_refs)
        except RefResolutionError as exc:
            return exc.code

    expected = outcome(chain.candidates_for(intent), refs)
    # the ledger's small candidate set resolves exactly like the whole ledger
    assert outcome(chain.events, refs) == expected
    rng = random.Random(seed)
    shuffled_refs = refs[:]
    rng.shuffle(shuffled_refs)
    shuffled_candidates = chain.candidates_for(intent)
    rng.shuffle(shuffled_candidates)
    assert outcome(shuffled_candidates, shuffled_refs) == expected
    if not isinstance(expected, str):
        indexes = [r.event_index for r in expected.resolved_refs]
        assert indexes == sorted(indexes)
        assert all(r.event_kind == "INTENT" for r in expected.resolved_refs if r.admitted_for == "governance")
        assert len(expected.normative_input_digests) == len(expected.governance_events)
        assert {e.kind for e in expected.governance_events} <= {EventKind.INTENT}


# ---- event refs name whole turns (context spec version 3: EXPAND_TURN_REFS)


def test_chat_history_example_as_written_with_turn_and_correlation_ids(new_chain):
    """A client that knows only the context system names INTENT-1 and EXECUTION-1 by the ids it
    has (correlation or turn id, ``ref_type: event``): the answer is admitted beside the
    question, execution_only, and the policy still sees only the INTENT."""
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    for refs in ([ev("c-T-1"), ev("c-T-1")], [ev("c-T-1"), ev("1")], [ev("1")]):
        i2 = chain.intent("T", "2", "Explain more", parent="1", refs=refs)
        res = resolve_refs(i2, chain.candidates_for(i2), DEFAULT, turn_refs=True)
        assert [(r.event_digest, r.event_kind, r.admitted_for) for r in res.resolved_refs] == [
            (i1.digest, "INTENT", "governance"),
            (x1.digest, "EXECUTION", "execution_only"),
        ]
        assert res.normative_input_digests == (i1.digest,)
        assert [e.digest for e in res.execution_events] == [x1.digest]
        assert res.applied_rules == (
            "SCOPE_BOUND",
            "EXPAND_TURN_REFS",
            "DEDUPE_REFS",
            "FILTER_INTENT_ONLY",
            "SORT_CANONICAL",
        )
        # Without the rule (what DECISIONs recorded before it recompute under): the INTENT only.
        old = resolve(chain, i2)
        assert [r.event_digest for r in old.resolved_refs] == [i1.digest]
        assert "EXPAND_TURN_REFS" not in old.applied_rules


def test_turn_refs_expand_only_what_exists_and_is_allowed(new_chain):
    chain = new_chain()
    i1, _, _ = chain.turn("T", "1", "denied turn", output=None)  # no EXECUTION recorded
    i2 = chain.intent("T", "2", "next", parent="1", refs=[ev("1")])
    res = resolve_refs(i2, chain.candidates_for(i2), DEFAULT, turn_refs=True)
    assert [r.event_digest for r in res.resolved_refs] == [i1.digest]

    j1, _, y1 = chain.turn("U", "1", "q")
    j2 = chain.intent("U", "2", "next", parent="1", refs=[ev("1")])
    no_exec = ContextSettings(allow_execution_refs_for_prompt=False)
    res = resolve_refs(j2, chain.candidates_for(j2), no_exec, turn_refs=True)
    assert [r.event_digest for r in res.resolved_refs] == [j1.digest]
    assert res.dropped_refs == ()  # the EXECUTION was never named: nothing to drop
    # An EXECUTION named on purpose is still dropped, and recorded.
    j3 = chain.intent("U", "3", "next", parent="2", refs=[ev("1", "execution")])
    res = resolve_refs(j3, chain.candidates_for(j3), no_exec, turn_refs=True)
    assert [d.event_digest for d in res.dropped_refs] == [y1.digest]

    # A digest ref names exactly one event, never a turn.
    k3 = chain.intent("U", "4", "next", parent="3", refs=[ev(j1.digest)])
    res = resolve_refs(k3, chain.candidates_for(k3), DEFAULT, turn_refs=True)
    assert [r.event_digest for r in res.resolved_refs] == [j1.digest]


def test_turn_refs_never_reach_a_later_execution(new_chain):
    """The referenced turn's EXECUTION recorded after the current INTENT is invisible, so a
    replay that sees more of the ledger resolves the same way."""
    chain = new_chain()
    i1 = chain.intent("T", "1", "slow question")
    chain.decision(i1)
    i2 = chain.intent("T", "2", "meanwhile", parent="1", refs=[ev("1")])
    chain.execution(i1, "late answer")
    res = resolve_refs(i2, [e for e in chain.events if e.turn_id == "1"], DEFAULT, turn_refs=True)
    assert [r.event_digest for r in res.resolved_refs] == [i1.digest]


def test_event_and_execution_refs_to_one_turn_resolve_once(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "q")
    i2 = chain.intent("T", "2", "next", parent="1", refs=[ev("1", "execution"), ev("1")])
    res = resolve_refs(i2, chain.candidates_for(i2), DEFAULT, turn_refs=True)
    assert [(r.ref_type, r.event_digest) for r in res.resolved_refs] == [
        ("event", i1.digest),
        ("event", x1.digest),  # the smallest (ref_type, ref_id) that reached it names it
    ]


# ---- empty refs under DENY: the first-turn exemption is an explicit option


@pytest.mark.parametrize(
    ("settings", "first_turn_denied"),
    [
        (ContextSettings(), False),  # the default: a thread's first turn is exempt
        (ContextSettings(empty_refs_first_turn="ALLOW"), False),
        (ContextSettings(empty_refs_first_turn="DENY"), True),  # the context system, strictly
        (ContextSettings(empty_refs_policy="ALLOW_EMPTY", empty_refs_first_turn="DENY"), False),
    ],
)
def test_empty_refs_first_turn_option(new_chain, settings, first_turn_denied):
    chain = new_chain()
    first = chain.intent("T", "1", "hello")
    if first_turn_denied:
        with pytest.raises(RefResolutionError) as err:
            resolve(chain, first, settings)
        assert err.value.code == EMPTY_REFS_DENIED
        assert "empty_refs_first_turn" in err.value.detail
    else:
        assert resolve(chain, first, settings).resolved_refs == ()
    follow_up = chain.intent("T", "2", "again", parent="1")
    if settings.empty_refs_policy == "DENY":
        with pytest.raises(RefResolutionError):
            resolve(chain, follow_up, settings)
    else:
        assert resolve(chain, follow_up, settings).resolved_refs == ()


def test_turn_refs_to_another_thread_stay_the_intent(new_chain):
    """With ``enforce_scope_bound: false`` a ref may land in another thread; the ledger hands
    over one event per id there, so such a ref is never expanded (same result from the
    candidates as from the whole ledger)."""
    chain = new_chain()
    other, _, _ = chain.turn("U", "1", "elsewhere")
    current = chain.intent("T", "1", "here", refs=[ev("c-U-1")])
    loose = ContextSettings(enforce_scope_bound=False)
    for candidates in (chain.candidates_for(current), chain.events):
        res = resolve_refs(current, candidates, loose, turn_refs=True)
        assert [r.event_digest for r in res.resolved_refs] == [other.digest]
