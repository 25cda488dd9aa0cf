"""The verify hot path's shortcuts give exactly what the definitions give.

- the canonical-JSON walk that admits a value to the C encoder (``_json_writes_it_canonically``)
  answers as the former walk did, and ``canonical_bytes`` equals ``rfc8785`` (hypothesis);
- ``check_artifact`` (no ``ArtifactCheck`` model per artifact) equals ``store.check``;
- the cached ``context_config_digest`` equals the digest of the effective config;
- ``build_context`` (its result no longer re-validated) recomputes every recorded DECISION.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.audit.helpers import config, make_ledger
from turngate.artifacts import LocalArtifactStore
from turngate.audit.verification.artifact_checks import check_artifact
from turngate.audit.verification.candidates import read_candidates
from turngate.core import canonical
from turngate.core.canonical import CanonicalizationError, canonical_bytes, digest
from turngate.core.context import ContextConfig, build_context, context_config_digest, load_context_config
from turngate.core.manifest import parse_pointer

_SAFE_INT = 2**53 - 1
_SORT_SAFE_BELOW = "\ue000"


def _former_walk(value: Any) -> bool:
    """``_json_writes_it_canonically`` as it was before the fast-path rewrite (the reference)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -_SAFE_INT <= item <= _SAFE_INT:
                continue
            return False
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str or (not key.isascii() and max(key) >= _SORT_SAFE_BELOW):
                    return False
                if type(child) is not str:
                    stack.append(child)
            continue
        if kind is list or kind is tuple:
            stack.extend(child for child in item if type(child) is not str)
            continue
        return False
    return True


_keys = st.one_of(st.text(max_size=4), st.sampled_from(["a", "é", "\ue000", "\U0001f600", "\ud7ff"]))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=4),
        st.dictionaries(st.integers(0, 3), children, min_size=1, max_size=2),  # non-str keys
    ),
    max_leaves=20,
)


@settings(max_examples=800, deadline=None)
@given(_values)
def test_the_canonical_walk_answers_as_before_and_bytes_equal_rfc8785(value: Any) -> None:
    assert canonical._json_writes_it_canonically(value) == _former_walk(value)
    try:
        expected: bytes | None = rfc8785.dumps(value)
    except Exception:  # any refusal: canonical_bytes must refuse too
        expected = None
    if expected is None:
        with pytest.raises(CanonicalizationError):
            canonical_bytes(value)
    else:
        assert canonical_bytes(value) == expected


def test_the_walk_refuses_what_it_must() -> None:
    for value in (1.5, 2**53, {"a": [1, {"b": 0.5}]}, {1: "x"}, {"\ue000": 1}, [object()], {"a": {1, 2}}):
        assert canonical._json_writes_it_canonically(value) is False
        assert _former_walk(value) is False
    for value in ("x", None, True, 2**53 - 1, {"a": [1, "b", None, {"c": (1, 2)}]}, {"é": "\ue000"}):
        assert canonical._json_writes_it_canonically(value) is True
        assert _former_walk(value) is True


def _pointer(store: LocalArtifactStore, data: bytes) -> dict[str, Any]:
    return store.put(data, kind="manifest").model_dump(mode="json")


def test_check_artifact_equals_the_store_check(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "artifacts")
    intact = _pointer(store, b'{"intact":true}')
    changed = _pointer(store, b'{"changed":true}')
    (store.root / changed["path"]).write_bytes(b'{"changed":TRUE}')
    gone = _pointer(store, b'{"gone":true}')
    (store.root / gone["path"]).unlink()
    other = _pointer(store, b'{"other":true}')
    cases = [
        intact,
        changed,
        gone,
        intact | {"size_bytes": intact["size_bytes"] + 1},
        intact | {"sha256": other["sha256"]},
        intact | {"artifact_id": other["sha256"]},
        intact | {"artifact_id": "my-own-id"},
        intact | {"path": other["path"]},
        intact | {"path": "standard/manifest/zz/not-ours"},
    ]
    for raw in cases:
        pointer = parse_pointer(raw)
        check = store.check(pointer)
        assert check_artifact(store, pointer) == (check.status, check.detail or "", check.retention or "")
    with pytest.raises(ValueError):
        store.check(parse_pointer(intact | {"path": "../outside"}))
    with pytest.raises(ValueError):
        check_artifact(store, parse_pointer(intact | {"path": "../outside"}))


def test_the_config_digest_is_cached_per_config_object() -> None:
    default = load_context_config(None, {})
    other = ContextConfig.model_validate({"context": {"max_refs": 7}})
    for cfg in (default, other, default, other):
        assert context_config_digest(cfg) == digest(cfg.effective())
    assert context_config_digest(default) != context_config_digest(other)
    equal = ContextConfig.model_validate(default.effective())
    assert context_config_digest(equal) == context_config_digest(default)


def test_build_context_recomputes_every_recorded_decision(tmp_path: Path) -> None:
    """Over many recorded turns (allowed, denied, with refs), the context digest that verify
    recomputes is the stored one, and the result equals a validated ContextBuild."""
    ledger = make_ledger(tmp_path / "data", 120, threads=12, deny_every=9)
    try:
        events = [ledger.store.get(i) for i in range(ledger.built.events)]
        decisions = {e.correlation_id: e for e in events if e is not None and e.kind == "DECISION"}
        intents = [e for e in events if e is not None and e.kind == "INTENT"]
        with ledger.store.read_connection("test") as conn:
            candidates = read_candidates(conn, intents)
        cfg = config()
        checked = 0
        for intent in intents:
            stored = decisions[intent.correlation_id].payload.get("context_digest")
            if stored is None:
                continue
            built = build_context(intent, candidates.get(intent.correlation_id, []), cfg)
            assert built.context_digest == stored
            assert type(built).model_validate(built.model_dump()) == built
            checked += 1
        assert checked >= 90
    finally:
        ledger.store.close()
