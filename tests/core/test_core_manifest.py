"""Context manifests (context observability): pointers and hashes only."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from turngate.core.assembly import assemble
from turngate.core.context import ContextConfig
from turngate.core.decision import decide
from turngate.core.manifest import ArtifactPointer, ContextManifest, ExclusionEntry, build_manifest
from turngate.core.policy import load_policy


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


POINTER = ArtifactPointer(
    artifact_id="a1",
    path="artifacts/turn-2/prompt.json",
    sha256="sha256:" + "a" * 64,
    size_bytes=120,
    created_at="2024-01-01T00:00:00Z",
)


def test_manifest_from_decision_and_assembly(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "first question " * 20, "first answer " * 20)
    i2, _, x2 = chain.turn("T", "2", "second question", "second answer", parent="1", refs=[ev("1")])
    current = chain.intent(
        "T",
        "3",
        "third question",
        parent="2",
        refs=[ev("1"), ev("1", "execution"), ev("2"), ev("2", "execution")],
    )
    outcome = decide(
        current,
        chain.candidates_for(current),
        ContextConfig(),
        load_policy("turngate.policies.allow_all"),
    )
    assembly = assemble("system", outcome.resolution, "third question", budget_tokens=40, current=current)
    manifest = build_manifest(
        outcome,
        assembly,
        intent=current,
        run_id="run-1",
        step_id="assemble",
        snapshot_id="snap-1",
        artifacts=[POINTER],
    )
    assert isinstance(manifest, ContextManifest)
    assert manifest.intent["event_digest"] == current.digest
    assert manifest.intent["context_digest"] == outcome.context_digest
    assert manifest.candidate_chunk_ids == (i1.digest, x1.digest, i2.digest, x2.digest)
    assert manifest.selected_chunk_ids == (i2.digest, x2.digest)
    assert [e.item_id for e in manifest.exclusion_log] == [i1.digest, x1.digest]
    assert {e.excluded_reason for e in manifest.exclusion_log} == {"budget_limit"}
    assert manifest.token_budget == 40
    assert manifest.prefix_hash == assembly.prefix_hash
    assert manifest.artifacts == (POINTER,)
    text = manifest.model_dump_json()
    for content in (
        "first question",
        "first answer",
        "second question",
        "second answer",
        "third question",
    ):
        assert content not in text  # pointers and hashes only


@pytest.mark.parametrize("path", ["/abs/path", "..\\x", "a/../b", "C:/x", "a//b", ""])
def test_artifact_paths_are_workspace_relative(path):
    with pytest.raises(ValidationError):
        ArtifactPointer(artifact_id="a", path=path, sha256="b" * 64, size_bytes=1)


def test_artifact_pointer_needs_a_sha256_and_a_size():
    with pytest.raises(ValidationError):
        ArtifactPointer(artifact_id="a", path="x/y", sha256="md5:abc", size_bytes=1)
    with pytest.raises(ValidationError):
        ArtifactPointer(artifact_id="a", path="x/y", sha256="b" * 64, size_bytes=-1)


def test_exclusion_reasons_are_a_closed_set():
    with pytest.raises(ValidationError):
        ExclusionEntry(item_id="x", item_type="memory", source_ref=1, excluded_reason="felt_like_it")
