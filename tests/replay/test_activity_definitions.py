"""The turn and job workflows call their activities through definitions
(workflows/turn_activities.py, jobs/activity_definitions.py); the worker registers the
implementations. Both must agree on name, input and result type, and the names recorded in
histories never change."""

from __future__ import annotations

import ast
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity

from turngate.activities.external_refs import ExternalRefActivities
from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.activities.turn_step import TurnStepActivities
from turngate.jobs import activity_definitions as job_activities
from turngate.jobs import workflows as job_workflows
from turngate.jobs.activities import JobActivities
from turngate.workflows import turn, turn_activities

PAIRS: list[tuple[Callable[..., Any], Callable[..., Any], str]] = [
    (turn_activities.begin_turn, LedgerActivities.begin_turn, "turngate.begin_turn"),
    (turn_activities.append_event, LedgerActivities.append_event, "turngate.append_event"),
    (
        turn_activities.store_fault_snapshots,
        LedgerActivities.store_fault_snapshots,
        "turngate.store_fault_snapshots",
    ),
    (
        turn_activities.resolve_external_refs,
        ExternalRefActivities.resolve_external_refs,
        "turngate.resolve_external_refs",
    ),
    (turn_activities.call_provider, ProviderActivities.call_provider, "turngate.call_provider"),
    (turn_activities.call_and_record, TurnStepActivities.call_and_record, "turngate.call_and_record"),
    (job_activities.ingest, JobActivities.ingest, "turngate.jobs.ingest"),
    (job_activities.embed, JobActivities.embed, "turngate.jobs.embed"),
    (job_activities.index, JobActivities.index, "turngate.jobs.index"),
]


def _name(fn: Callable[..., Any]) -> str | None:
    defn = activity._Definition.from_callable(fn)
    return defn.name if defn else None


def _types(fn: Callable[..., Any]) -> tuple[list[Any], Any]:
    hints = typing.get_type_hints(fn)
    params = [hints[p] for p in inspect.signature(fn).parameters if p != "self"]
    return params, hints["return"]


@pytest.mark.parametrize(("definition", "implementation", "recorded"), PAIRS, ids=[p[2] for p in PAIRS])
def test_definition_matches_its_implementation(
    definition: Callable[..., Any], implementation: Callable[..., Any], recorded: str
) -> None:
    assert _name(definition) == _name(implementation) == recorded
    assert _types(definition) == _types(implementation)


def test_definitions_cannot_run() -> None:
    with pytest.raises(NotImplementedError, match="definition"):
        turn_activities.append_event(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("module", [turn, job_workflows], ids=["turn", "jobs"])
def test_the_workflow_names_no_activity_by_string_nor_imports_an_implementation(module: Any) -> None:
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(
        name and (name.startswith("turngate.activities") or name == "turngate.jobs.activities")
        for name in imported
    )
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not {recorded for _, _, recorded in PAIRS} & strings
    assert not {"INGEST_ACTIVITY", "EMBED_ACTIVITY", "INDEX_ACTIVITY"} & names
