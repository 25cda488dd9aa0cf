"""Every ``workflow.patched`` id is in the patch register, and so is every id a recorded history
holds: an id can only be retired through the register (workflows/patches.py)."""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path

import turngate
from tests.replay.test_replay import HISTORIES
from turngate.workflows import patches
from turngate.workflows.patches import PATCH_IDS, REGISTER

WORKFLOWS = Path(turngate.__file__).parent / "workflows"


def _patched_arguments() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"patched", "deprecate_patch"}
            ):
                argument = node.args[0]
                assert isinstance(argument, ast.Name), f"{path.name}: patch ids are named constants"
                found.append((path.name, argument.id))
    return found


def test_every_patch_the_workflow_asks_is_registered() -> None:
    asked = _patched_arguments()
    assert asked, "the turn workflow asks patches"
    for module, name in asked:
        assert getattr(patches, name, None) in PATCH_IDS, f"{module}: {name} is not in the patch register"


def test_every_patch_a_recorded_history_holds_is_registered() -> None:
    recorded: set[str] = set()
    for path in HISTORIES.glob("*.json"):
        for event in json.loads(path.read_text())["events"]:
            attrs = event.get("markerRecordedEventAttributes")
            if attrs and attrs["markerName"] == "core_patch":
                data = json.loads(base64.b64decode(attrs["details"]["patch-data"]["payloads"][0]["data"]))
                recorded.add(data["id"])
    assert recorded, "the recorded histories hold patch markers"
    assert recorded <= PATCH_IDS, recorded - PATCH_IDS


def test_the_register_has_one_entry_per_id_with_a_retirement_plan() -> None:
    assert len(REGISTER) == len(PATCH_IDS)
    assert all(patch.retire and patch.old_branch for patch in REGISTER)
