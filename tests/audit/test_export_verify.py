"""`turngate verify --events FILE [--artifacts DIR]`: an exported stream (JSON Lines of /snapshot
events or pages) verified offline, with no access to the gateway's database."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.audit.helpers import Ledger, config, make_ledger
from turngate.artifacts import open_artifact_store
from turngate.artifacts.configs import store_context_config
from turngate.audit.report import verify_command
from turngate.cli import build_parser
from turngate.settings import load_settings

TURNS = 24


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    built = make_ledger(tmp_path_factory.mktemp("export") / "data", TURNS, threads=4, deny_every=5)
    yield built
    built.store.close()


def exported_events(ledger: Ledger) -> list[dict[str, Any]]:
    """What paging through /snapshot gives (each page's `events`, as `to_wire` serves them)."""
    found: list[dict[str, Any]] = []
    offset = 0
    while True:
        length, page = ledger.store.snapshot(offset=offset, limit=10)
        found += [event.to_wire() for event in page]
        offset += len(page)
        if offset >= length:
            return found


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def verify(
    tmp_path: Path, events: Path, artifacts: Path | None = None, settings: Any = None, **kw: Any
) -> tuple[int, str, str]:
    """As the CLI runs it, from a data dir that holds no ledger at all."""
    out, err = io.StringIO(), io.StringIO()
    settings = settings or load_settings(data_dir=tmp_path / "no-ledger-here")
    args: dict[str, Any] = {"thread_id": None, "since": None, "until": None, "as_json": True}
    args.update(kw)
    code = verify_command(
        settings,
        out=out,
        err=err,
        events_file=events,
        artifacts_dir=str(artifacts) if artifacts else None,
        **args,
    )
    assert not (tmp_path / "no-ledger-here" / "ledger.sqlite3").exists()
    return code, out.getvalue(), err.getvalue()


def test_an_export_with_its_artifacts_verifies_offline(ledger: Ledger, tmp_path: Path) -> None:
    events = write_lines(tmp_path / "export.jsonl", exported_events(ledger))
    code, out, _ = verify(tmp_path, events, ledger.artifacts_root)
    report = json.loads(out)
    assert code == 0 and report["ok"], report["failures"]
    assert report["checked_events"] == ledger.built.events
    assert report["checked_decisions"] == TURNS  # every DECISION re-derived from its INTENT and refs
    assert report["checked_artifacts"] == ledger.built.artifacts > 0
    assert report["head_digest"] == ledger.store.head()[1]


def test_page_lines_and_any_order_are_read_too(ledger: Ledger, tmp_path: Path) -> None:
    wire = exported_events(ledger)
    pages = [
        {"length": len(wire), "offset": n, "limit": 10, "events": wire[n : n + 10]}
        for n in range(0, len(wire), 10)
    ]
    events = write_lines(tmp_path / "pages.jsonl", list(reversed(pages)))
    code, out, _ = verify(tmp_path, events, ledger.artifacts_root)
    assert code == 0, out


def test_without_artifacts_the_pointers_are_not_checked(ledger: Ledger, tmp_path: Path) -> None:
    code, out, _ = verify(tmp_path, write_lines(tmp_path / "e.jsonl", exported_events(ledger)))
    report = json.loads(out)
    assert code == 0 and report["checked_artifacts"] == 0
    assert [w["kind"] for w in report["warnings"]] == ["artifacts_not_checked"]


def test_a_tampered_export_fails_naming_the_event(ledger: Ledger, tmp_path: Path) -> None:
    wire = exported_events(ledger)
    intent = next(e for e in wire if e["kind"] == "INTENT" and e["index"] > 10)
    intent["payload"]["payload"]["message"] = "something the client never said"
    code, out, _ = verify(tmp_path, write_lines(tmp_path / "t.jsonl", wire), ledger.artifacts_root)
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert intent["index"] in {f["index"] for f in report["failures"]}


def test_an_export_verifies_up_to_an_index(ledger: Ledger, tmp_path: Path) -> None:
    wire = [e for e in exported_events(ledger) if e["index"] <= 20]
    code, out, _ = verify(tmp_path, write_lines(tmp_path / "r.jsonl", wire), ledger.artifacts_root)
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert report["head_index"] == 20 and report["checked_events"] == 21


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda wire: [*wire[:5], *wire[6:]], "the export has a gap: index 5 is missing"),
        (lambda wire: wire[3:], "the export starts at index 3: export the ledger from index 0"),
        (lambda wire: [*wire, wire[3]], "index 3 appears twice"),
        (lambda wire: [*wire[:2], "not an object", *wire[2:]], "line 3: not a JSON object"),
        (lambda wire: [*wire[:2], {"index": 2}], "line 3: not an exported event"),
    ],
)
def test_an_export_that_is_not_a_ledger_range_is_an_error(
    ledger: Ledger, tmp_path: Path, change, says
) -> None:
    events = write_lines(tmp_path / "bad.jsonl", change(exported_events(ledger)))
    code, out, err = verify(tmp_path, events)
    assert code == 2 and out == ""
    assert says in err


def test_the_cli_takes_events_and_artifacts() -> None:
    args = build_parser().parse_args(
        ["verify", "--events", "export.jsonl", "--artifacts", "exported-artifacts"]
    )
    assert (args.events, args.artifacts) == ("export.jsonl", "exported-artifacts")


def test_an_export_made_under_another_config_uses_the_exported_stored_config(
    ledger: Ledger, tmp_path: Path
) -> None:
    artifacts = tmp_path / "exported-artifacts"
    shutil.copytree(ledger.artifacts_root, artifacts)
    store_context_config(open_artifact_store(str(artifacts)), config())
    events = write_lines(tmp_path / "export.jsonl", exported_events(ledger))
    drift = {"data_dir": tmp_path / "no-ledger-here", "context_max_refs": "7"}

    code, out, _ = verify(tmp_path, events, artifacts, settings=load_settings(**drift))
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["checked_decisions"] == TURNS
    assert [f["kind"] for f in report["info"]] == ["config_drift"]

    # Without the artifacts, the DECISIONs cannot be recomputed: not OK, exit 3, unless allowed.
    code, out, _ = verify(tmp_path, events, settings=load_settings(**drift))
    report = json.loads(out)
    assert code == 3 and not report["ok"] and report["unchecked_decisions"] == TURNS
    assert "no artifact store was given" in report["unchecked"][0]["detail"]
    code, out, _ = verify(tmp_path, events, settings=load_settings(**drift), allow_unchecked=True)
    assert code == 0 and json.loads(out)["unchecked_decisions"] == TURNS
