"""External refs (case_query, artifact.handle): admission, separation from ledger refs, prompt
assembly under a budget, and what the manifest and the DECISION record."""

from __future__ import annotations

import json

import pytest

from turngate.core.assembly import assemble
from turngate.core.context import ContextConfig, ContextSettings
from turngate.core.decision import decide
from turngate.core.events import AdmissionError, CaseQueryRef, HandleRef, parse_intent
from turngate.core.external import EXTERNAL_PREAMBLE, ExternalContext, ExternalItem
from turngate.core.manifest import ExclusionEntry, build_manifest
from turngate.core.policy import load_policy
from turngate.core.refs import external_refs_of, ref_lookup_ids, resolve_refs

CASE = {"ref_type": "case_query", "case_id": "c1", "query": "lighthouse", "top_k": 2}
HANDLE = {"ref_type": "artifact.handle", "ref_id": "h-1", "kind": "note"}


def envelope(refs: list[object]) -> dict[str, object]:
    return {
        "interface_version": 3,
        "correlation_id": "c-1",
        "payload": {"intent_type": "chat.message", "declared_refs": refs, "payload": {"message": "hi"}},
    }


def chunk(n: int, text: str) -> ExternalItem:
    return ExternalItem(
        item_id=f"sha256:{n:064x}",
        source_ref="case_query[0]:c1@sha256:" + "9" * 64,
        label=f"case c1, chunk {n}",
        text=text,
        included_reason="declared_case_query",
    )


def test_admission_parses_each_ref_kind_and_records_them_as_declared():
    env = parse_intent(envelope([{"ref_type": "event", "ref_id": "t1"}, CASE, HANDLE]))
    kinds = [type(ref).__name__ for ref in env.payload.declared_refs]
    assert kinds == ["DeclaredRef", "CaseQueryRef", "HandleRef"]
    recorded = env.intent_event_payload()["declared_refs"]
    assert recorded[1] == CASE | {"min_score": 0.0}  # defaults recorded: the effective declaration
    assert recorded[2] == HANDLE


@pytest.mark.parametrize(
    "bad",
    [
        {"ref_type": "case_query", "case_id": "c1"},  # no query
        {"ref_type": "case_query", "case_id": "c1", "query": "q", "top_k": 0},
        {"ref_type": "case_query", "case_id": "c1", "query": "q", "top_k": "5"},  # strict
        {"ref_type": "artifact.handle", "ref_id": "h"},  # no kind
    ],
)
def test_malformed_external_refs_are_refused_at_admission(bad):
    with pytest.raises(AdmissionError) as caught:
        parse_intent(envelope([bad]))
    assert caught.value.field and caught.value.field.startswith("payload.declared_refs.0")


def test_external_refs_are_not_ledger_refs(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "q1", "a1")
    current = chain.intent(
        "T", "2", "q2", parent="1", refs=[CASE, {"ref_type": "event", "ref_id": "1"}, HANDLE]
    )
    assert ref_lookup_ids(current.payload["declared_refs"]) == ["1"]
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    assert [ref.ref_id for ref in resolution.resolved_refs] == ["1"]
    assert external_refs_of(current) == [CaseQueryRef.model_validate(CASE), HandleRef.model_validate(HANDLE)]


def test_external_texts_come_just_before_the_current_message(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "q1", "a1")
    current = chain.intent("T", "2", "q2", parent="1", refs=[{"ref_type": "event", "ref_id": "1"}, CASE])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    items = [chunk(1, "first chunk"), chunk(2, "second chunk")]
    assembly = assemble("sys", resolution, "q2", current=current, external=items)
    roles = [m.role for m in assembly.messages]
    assert roles == ["system", "user", "user", "user"]
    block = assembly.messages[2].content
    assert block.startswith(EXTERNAL_PREAMBLE) and "[1] case c1, chunk 1\nfirst chunk" in block
    assert block.index("first chunk") < block.index("second chunk")
    assert [(e.item_id, e.item_type, e.included_reason) for e in assembly.included[1:3]] == [
        (items[0].item_id, "evidence", "declared_case_query"),
        (items[1].item_id, "evidence", "declared_case_query"),
    ]


def test_over_budget_history_goes_first_then_the_last_ranked_texts(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "q" * 300, "a" * 300)
    current = chain.intent("T", "2", "now", parent="1", refs=[{"ref_type": "event", "ref_id": "1"}, CASE])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    items = [chunk(1, "x" * 150), chunk(2, "y" * 150)]
    budget = (len(EXTERNAL_PREAMBLE) + 200) // 3 + 10
    assembly = assemble(None, resolution, "now", budget_tokens=budget, current=current, external=items)
    reasons = [(e.item_type, e.excluded_reason) for e in assembly.excluded]
    assert reasons.count(("evidence", "budget_limit")) == 1 and ("user_input", "budget_limit") in reasons
    assert [e.item_id for e in assembly.excluded if e.item_type == "evidence"] == [items[1].item_id]
    assert "x" * 150 in assembly.messages[0].content and "y" * 150 not in assembly.messages[0].content
    assert assembly.fits


def test_no_external_items_changes_nothing(new_chain):
    chain = new_chain()
    chain.turn("T", "1", "q1", "a1")
    current = chain.intent("T", "2", "q2", parent="1", refs=[{"ref_type": "event", "ref_id": "1"}])
    resolution = resolve_refs(current, chain.candidates_for(current), ContextSettings())
    assert assemble("s", resolution, "q2", current=current) == assemble(
        "s", resolution, "q2", current=current, external=()
    )


def test_manifest_and_decision_record_the_retrieval(new_chain):
    chain = new_chain()
    current = chain.intent("T", "1", "q", refs=[CASE])
    outcome = decide(current, [], ContextConfig(), load_policy("turngate.policies.allow_all"))
    items = (chunk(1, "kept text"),)
    record = {
        "ref_type": "case_query",
        "case_id": "c1",
        "index_version": "sha256:" + "9" * 64,
        "retrieval_query": "lighthouse",
        "top_k": 2,
        "min_score": 0.0,
        "ranking_method": "hybrid-linear",
        "ranking_version": "1",
        "candidate_chunk_ids": [items[0].item_id, f"sha256:{3:064x}"],
        "selected_chunk_ids": [items[0].item_id],
        "scores": {items[0].item_id: 0.9, f"sha256:{3:064x}": 0.01},
        "exclusions": [{"chunk_id": f"sha256:{3:064x}", "reason": "below_threshold", "score": 0.01}],
    }
    excluded = ExclusionEntry(
        item_id=f"sha256:{3:064x}",
        item_type="evidence",
        source_ref=items[0].source_ref,
        excluded_reason="score_below_threshold",
    )
    external = ExternalContext(items=items, excluded=(excluded,), records=(record,))
    assembly = assemble(None, outcome.resolution, "q", current=current, external=items)
    manifest = build_manifest(
        outcome, assembly, intent=current, run_id="r", step_id="decision", external=external
    )
    assert manifest.candidate_chunk_ids == tuple(record["candidate_chunk_ids"])
    assert manifest.selected_chunk_ids == (items[0].item_id,)
    assert excluded in manifest.exclusion_log
    assert manifest.external_refs == (record,)
    assert manifest.retrieval_query["case_queries"][0]["index_version"] == record["index_version"]
    assert "kept text" not in manifest.model_dump_json()  # ids and scores, never texts
    kept = external.decision_record()[0]
    assert kept["index_version"] == record["index_version"] and kept["selected_chunk_ids"] == [
        items[0].item_id
    ]
    assert "scores" not in kept and "kept text" not in json.dumps(kept)


def test_manifest_names_the_ranking_of_its_case_queries(new_chain):
    """``reranker_model`` / ``reranker_version``: what ranked the turn's retrieval (null without
    one), in the manifests of an allowed and of a denied turn."""
    from turngate.core.manifest import build_denied_manifest

    chain = new_chain()
    current = chain.intent("T", "1", "q", refs=[CASE, CASE | {"query": "harbour"}, HANDLE])
    outcome = decide(current, [], ContextConfig(), load_policy("turngate.policies.allow_all"))
    ranked = {
        "ref_type": "case_query",
        "case_id": "c1",
        "ranking_method": "hybrid-linear",
        "ranking_version": "1",
    }
    handle = {"ref_type": "artifact.handle", "handle_id": "h-1", "reason_code": "workbench.disabled"}
    external = ExternalContext(records=(ranked, ranked, handle))
    assembly = assemble(None, outcome.resolution, "q", current=current)
    allowed = build_manifest(
        outcome, assembly, intent=current, run_id="r", step_id="decision", external=external
    )
    denied = build_denied_manifest(outcome, intent=current, run_id="r", step_id="decision", external=external)
    for manifest in (allowed, denied):
        assert (manifest.reranker_model, manifest.reranker_version) == ("hybrid-linear", "1")
    two = ExternalContext(records=(ranked, ranked | {"ranking_method": "bm25", "ranking_version": "2"}))
    manifest = build_manifest(outcome, assembly, intent=current, run_id="r", step_id="decision", external=two)
    assert (manifest.reranker_model, manifest.reranker_version) == ("hybrid-linear,bm25", "1,2")
    for none in (None, ExternalContext(records=(handle,))):
        manifest = build_manifest(
            outcome, assembly, intent=current, run_id="r", step_id="decision", external=none
        )
        assert (manifest.reranker_model, manifest.reranker_version) == (None, None)
