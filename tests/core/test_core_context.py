"""Context config loading, the context spec and the context digest scope (the context system)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.core.context import (
    ContextConfig,
    ContextConfigError,
    ContextSettings,
    NormalizationConfig,
    build_context,
    build_context_spec,
    context_config_digest,
    load_context_config,
    recompute_context_digest,
)
from turngate.core.events import Event, EventDraft, seal

#: The published gateway's configuration, kept beside the checkout (not part of the repository).
DBL_ANCHOR = Path(__file__).resolve().parents[3] / "shared/anchors/dbl-gateway-1.0.1-config/context.json"
CFG = load_context_config(None, {})


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "context.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def dbl_file() -> dict:
    return {
        "schema_version": "1",
        "context": {
            "max_refs": 50,
            "empty_refs_policy": "DENY",
            "expand_last_n": 10,
            "allow_execution_refs_for_prompt": True,
            "canonical_sort": "event_index_asc",
            "enforce_scope_bound": True,
        },
        "normalization": {"rules": ["FILTER_INTENT_ONLY", "SCOPE_BOUND", "SORT_CANONICAL"]},
    }


# --------------------------------------------------------------------------- config loading


def test_packaged_default_matches_seed_000():
    assert ContextConfig() == CFG
    assert ContextSettings() == CFG.context
    assert context_config_digest(CFG).startswith("sha256:")


def test_dbl_anchor_file_loads_with_its_unknown_keys():
    if not DBL_ANCHOR.exists():  # pragma: no cover - the anchor lives outside the repo
        pytest.skip("DBL anchor config not present")
    cfg = load_context_config(DBL_ANCHOR, {})
    # handle_content_fetch, $schema and disabled conditional_rules are tolerated and ignored
    assert context_config_digest(cfg) == context_config_digest(CFG)


def test_unknown_keys_and_rule_order_do_not_change_the_digest(tmp_path):
    data = dbl_file()
    data["extra"] = {"anything": [1, 2]}
    data["context"]["future_knob"] = True
    data["normalization"]["rules"] = ["SORT_CANONICAL", "SCOPE_BOUND", "FILTER_INTENT_ONLY"]
    cfg = load_context_config(write(tmp_path, data), {})
    assert context_config_digest(cfg) == context_config_digest(CFG)


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"TURNGATE_CONTEXT_MAX_REFS": "7"}, "max_refs", 7),
        ({"TURNGATE_CONTEXT_EMPTY_REFS_POLICY": "allow_empty"}, "empty_refs_policy", "ALLOW_EMPTY"),
        (
            {"TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS": "false"},
            "allow_execution_refs_for_prompt",
            False,
        ),
        ({"TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND": "0"}, "enforce_scope_bound", False),
    ],
)
def test_env_overrides_change_the_effective_config_and_its_digest(env, field, value):
    cfg = load_context_config(None, env)
    assert getattr(cfg.context, field) == value
    assert context_config_digest(cfg) != context_config_digest(CFG)
    if field == "enforce_scope_bound":
        assert "SCOPE_BOUND" not in cfg.normalization.rules


def test_empty_env_values_are_ignored():
    assert load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": " "}) == CFG


@pytest.mark.parametrize(
    "env",
    [
        {"TURNGATE_CONTEXT_MAX_REFS": "many"},
        {"TURNGATE_CONTEXT_MAX_REFS": "-1"},
        {"TURNGATE_CONTEXT_EMPTY_REFS_POLICY": "MAYBE"},
        {"TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS": "perhaps"},
        {"TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND": "2"},
    ],
)
def test_bad_env_values_are_refused(env):
    with pytest.raises(ContextConfigError) as err:
        load_context_config(None, env)
    assert next(iter(env)) in str(err.value)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: [1, 2], "JSON object"),
        (lambda d: {**d, "schema_version": "2"}, "schema_version"),
        (lambda d: {**d, "context": {**d["context"], "max_refs": "50"}}, "max_refs"),
        (
            lambda d: {**d, "context": {**d["context"], "enforce_scope_bound": "yes"}},
            "enforce_scope_bound",
        ),
        (
            lambda d: {**d, "context": {**d["context"], "canonical_sort": "event_index_desc"}},
            "canonical_sort",
        ),
        (
            lambda d: {**d, "context": {**d["context"], "empty_refs_policy": "deny"}},
            "empty_refs_policy",
        ),
        (
            lambda d: {
                **d,
                "normalization": {"rules": ["FILTER_INTENT_ONLY", "SORT_CANONICAL", "X"]},
            },
            "unknown",
        ),
        (
            lambda d: {**d, "normalization": {"rules": ["SCOPE_BOUND", "SORT_CANONICAL"]}},
            "FILTER_INTENT_ONLY",
        ),
        (
            lambda d: {**d, "normalization": {"rules": ["FILTER_INTENT_ONLY", "SORT_CANONICAL"]}},
            "SCOPE_BOUND",
        ),
        (
            lambda d: {
                **d,
                "normalization": {
                    **d["normalization"],
                    "conditional_rules": {"EXPAND_THREAD_HISTORY": {"enabled": True}},
                },
            },
            "EXPAND_THREAD_HISTORY",
        ),
    ],
)
def test_bad_files_are_refused_with_a_clear_message(tmp_path, mutate, needle):
    data = mutate(dbl_file())
    path = write(tmp_path, data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(ContextConfigError) as err:
        load_context_config(path, {})
    assert needle in str(err.value)
    assert path.as_posix() in str(err.value)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ContextConfigError, match="does not exist"):
        load_context_config(tmp_path / "nope.json", {})


def test_normalization_rules_are_kept_in_application_order():
    rules = NormalizationConfig(rules=("SORT_CANONICAL", "FILTER_INTENT_ONLY", "SCOPE_BOUND")).rules
    assert rules == ("SCOPE_BOUND", "FILTER_INTENT_ONLY", "SORT_CANONICAL")


# --------------------------------------------------------------------------- spec and digest


def example_thread(
    chain, *, refs=None, message="Explain more", thread="T", turn="2", parent="1", cfg_obs=None
):
    i1, _, x1 = chain.turn(thread, "1", "What is 2+2?", "2+2 equals 4")
    if refs is None:
        refs = [ev("1"), ev("1", "execution")]
    current = chain.intent(thread, turn, message, parent=parent, refs=refs, obs=cfg_obs)
    return i1, x1, current


def test_context_spec_has_exactly_the_seed_000_scope(new_chain):
    chain = new_chain()
    i1, x1, current = example_thread(chain)
    built = build_context(current, chain.candidates_for(current), CFG, schema_version="turngate.ctxspec.1")
    spec = built.context_spec
    assert set(spec) == {
        "identity",
        "intent",
        "declared_refs",
        "retrieval",
        "assembly_rules",
        "normative_input_digests",
    }
    # Version 2 (the current one) adds the external refs, and only them.
    current_spec = build_context(current, chain.candidates_for(current), CFG).context_spec
    assert set(current_spec) == set(spec) | {"external_refs"}
    assert current_spec["external_refs"] == {"declared": [], "resolved": None}
    assert spec["identity"] == {"thread_id": "T", "turn_id": "2", "parent_turn_id": "1"}
    assert spec["intent"] == {"intent_type": "chat.message", "user_input": "Explain more"}
    assert spec["declared_refs"] == [ev("1"), ev("1", "execution")]
    assert set(spec["retrieval"]) == {"resolved_refs", "normalization"}
    assert [r["event_digest"] for r in spec["retrieval"]["resolved_refs"]] == [i1.digest, x1.digest]
    assert spec["retrieval"]["normalization"] == {
        "applied_rules": ["SCOPE_BOUND", "DEDUPE_REFS", "FILTER_INTENT_ONLY", "SORT_CANONICAL"],
        "config_digest": context_config_digest(CFG),
    }
    assert spec["assembly_rules"] == {
        "schema_version": "turngate.ctxspec.1",
        "ordering": "event_index_asc",
    }
    assert spec["normative_input_digests"] == [i1.digest]
    assert set(built.assembled_context) == {
        "normative_input_digests",
        "governance_item_digests",
        "intent_view_digest",
    }
    assert "2+2 equals 4" not in json.dumps(built.assembled_context)
    assert "2+2 equals 4" not in json.dumps(spec)


def test_dropped_refs_are_materialized_in_the_normalization_record(new_chain):
    chain = new_chain()
    _, x1, current = example_thread(chain)
    cfg = load_context_config(None, {"TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS": "false"})
    built = build_context(current, chain.candidates_for(current), cfg)
    normalization = built.context_spec["retrieval"]["normalization"]
    assert "DROP_EXECUTION_REFS" in normalization["applied_rules"]
    assert [d["event_digest"] for d in normalization["dropped_refs"]] == [x1.digest]


def test_build_context_spec_matches_build_context(new_chain):
    chain = new_chain()
    _, _, current = example_thread(chain)
    built = build_context(current, chain.candidates_for(current), CFG)
    assert build_context_spec(current, built.resolution, CFG) == built.context_spec


def test_recompute_equals_stored(new_chain):
    chain = new_chain()
    _, _, current = example_thread(chain)
    stored = build_context(current, chain.candidates_for(current), CFG).context_digest
    # replay: the events come back from storage as JSON
    reloaded = [Event.model_validate(json.loads(e.model_dump_json())) for e in chain.events]
    intent = reloaded[current.index]
    assert recompute_context_digest(intent, reloaded, CFG) == stored


def reversed_keys(value):
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


def test_digest_is_stable_under_dict_key_order(new_chain):
    chain = new_chain()
    _, _, current = example_thread(chain)
    digest = build_context(current, chain.candidates_for(current), CFG).context_digest
    flipped = [Event.model_validate(reversed_keys(e.model_dump(mode="json"))) for e in chain.events]
    assert list(flipped[0].payload) != list(chain.events[0].payload)
    again = build_context(flipped[current.index], chain.candidates_for(flipped[current.index]), CFG)
    assert again.context_digest == digest


def reseal(events: list[Event], position: int, **changes) -> list[Event]:
    """Rebuild the chain with one event changed (later events re-linked)."""
    out: list[Event] = []
    for n, event in enumerate(events):
        draft = EventDraft(**{k: v for k, v in event.model_dump().items() if k in EventDraft.model_fields})
        if n == position:
            draft = draft.model_copy(update=changes)
        out.append(seal(draft, n, out[-1].digest if out else None, created_at=event.created_at))
    return out


def digest_of(events: list[Event], position: int, cfg: ContextConfig = CFG) -> str:
    intent = events[position]
    return build_context(intent, events[:position], cfg).context_digest


# Excluded from the digest (the context system): timestamps, storage ids, _obs, EXECUTION output content.
EXCLUDED_CHANGES = st.sampled_from(["created_at", "obs_intent", "obs_exec", "storage_id", "output"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change=EXCLUDED_CHANGES, text=st.text(min_size=1, max_size=30), seed=st.integers(0, 10_000))
def test_excluded_fields_never_change_the_context_digest(new_chain, change, text, seed):
    chain = new_chain()
    i1, x1, current = example_thread(chain)
    events = list(chain.events)
    base = digest_of(events, current.index)
    rng = random.Random(seed)
    if change == "created_at":
        events = [
            e.model_copy(update={"created_at": f"2030-01-0{rng.randint(1, 9)}T{text!r}"}) for e in events
        ]
    elif change == "obs_intent":
        target = rng.choice([i1.index, current.index])
        payload = {**events[target].payload, "_obs": {"seen_by": text, "storage_id": rng.random()}}
        events = reseal(events, target, payload=payload)
    elif change == "obs_exec":
        events = reseal(events, x1.index, payload={**x1.payload, "_obs": {"latency_ms": text}})
    elif change == "storage_id":
        events = [
            Event.model_validate({**e.model_dump(), "id": rng.randint(1, 10**6), "row": text}) for e in events
        ]
    else:
        # EXECUTION output content is not digest material: only its event digest (a pointer) is.
        x = events[x1.index]
        events[x1.index] = x.model_copy(update={"payload": {**x.payload, "output_text": text}})
    assert digest_of(events, current.index) == base


def included_variants(new_chain):
    """(description, digest) for changes to fields that ARE in the digest scope."""
    chain = new_chain()
    i1, _, current = example_thread(chain)
    events = list(chain.events)
    pos = current.index
    out = {}
    out["message"] = digest_of(
        reseal(events, pos, payload={**current.payload, "payload": {"message": "Other"}}), pos
    )
    elsewhere = new_chain()
    example_thread(elsewhere, thread="T2")
    out["thread_id"] = digest_of(elsewhere.events, pos)
    out["turn_id"] = digest_of(reseal(events, pos, turn_id="2b"), pos)
    out["parent_turn_id"] = digest_of(reseal(events, pos, parent_turn_id="0"), pos)
    out["declared_refs"] = digest_of(
        reseal(events, pos, payload={**current.payload, "declared_refs": [ev("1")]}), pos
    )
    out["inputs"] = digest_of(reseal(events, pos, payload={**current.payload, "inputs": {"k": 1}}), pos)
    out["referenced_intent"] = digest_of(
        reseal(events, i1.index, payload={**i1.payload, "payload": {"message": "What is 3+3?"}}),
        pos,
    )
    out["referenced_intent_inputs"] = digest_of(
        reseal(events, i1.index, payload={**i1.payload, "inputs": {"lang": "lt"}}), pos
    )
    for env in (
        {"TURNGATE_CONTEXT_MAX_REFS": "10"},
        {"TURNGATE_CONTEXT_EMPTY_REFS_POLICY": "ALLOW_EMPTY"},
        {"TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND": "false"},
        {"TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS": "false"},
    ):
        out[f"config {env}"] = digest_of(events, pos, load_context_config(None, env))
    return digest_of(events, pos), out


def test_included_fields_always_change_the_context_digest(new_chain):
    base, variants = included_variants(new_chain)
    for name, value in variants.items():
        assert value != base, name
    assert len(set(variants.values())) == len(variants)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=st.text(min_size=1, max_size=40).filter(lambda s: s.strip() and s.strip() != "Explain more"))
def test_any_other_user_message_changes_the_digest(new_chain, message):
    chain = new_chain()
    _, _, current = example_thread(chain)
    events = list(chain.events)
    base = digest_of(events, current.index)
    changed = reseal(
        events, current.index, payload={**current.payload, "payload": {"message": message.strip()}}
    )
    assert digest_of(changed, current.index) != base


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(5)))
def test_digest_is_stable_under_declared_ref_order(new_chain, order):
    chain = new_chain()
    for n in range(1, 4):
        chain.turn("T", str(n), f"m{n}", f"o{n}")
    refs = [ev("1"), ev("3", "execution"), ev("2"), ev("c-T-3"), ev("1")]
    base_intent = chain.intent("T", "4", "q", parent="3", refs=refs)
    base = build_context(base_intent, chain.candidates_for(base_intent), CFG)
    shuffled = [refs[i] for i in order]
    other = base_intent.model_copy(update={"payload": {**base_intent.payload, "declared_refs": shuffled}})
    again = build_context(other, chain.candidates_for(other), CFG)
    assert again.context_digest == base.context_digest
    assert again.resolution == base.resolution


def test_the_packaged_config_names_the_first_turn_exemption_and_keeps_its_digest():
    """The packaged file says ``empty_refs_first_turn: ALLOW`` out loud; the default is outside
    the digest, so it is the digest of a file without it (every earlier DECISION's)."""
    packaged = load_context_config(None, {})
    assert packaged.context.empty_refs_first_turn == "ALLOW"
    assert context_config_digest(packaged) == context_config_digest(ContextConfig())
    assert "empty_refs_first_turn" not in packaged.effective()["context"]
    strict = load_context_config(None, {"TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN": "DENY"})
    assert strict.effective()["context"]["empty_refs_first_turn"] == "DENY"
