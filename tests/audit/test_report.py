"""`turngate verify` as the CLI runs it: text and JSON, exit codes, progress lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.audit.helpers import Ledger, make_ledger
from turngate.audit.report import ProgressPrinter, verify_command


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    built = make_ledger(tmp_path / "data", 12, threads=3, deny_every=5)
    yield built
    built.store.close()


def run(ledger: Ledger, **kw: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args: dict[str, object] = {"thread_id": None, "since": None, "until": None, "as_json": False}
    args.update(kw)
    code = verify_command(ledger.settings(), out=out, err=err, **args)
    return code, out.getvalue(), err.getvalue()


def test_an_untouched_ledger_exits_zero_with_a_summary_line(ledger: Ledger) -> None:
    code, out, _ = run(ledger)
    assert code == 0
    [line] = out.splitlines()
    assert line.startswith(
        f"verify OK: {ledger.built.events} events, 12 decisions, {ledger.built.artifacts} artifacts"
    )
    assert f"head {ledger.built.head_index} sha256:" in line and "0 failure(s)" in line


def test_every_failure_is_listed_with_its_index_and_reason(ledger: Ledger) -> None:
    intent, execution = ledger.row("c-0000003", "INTENT"), ledger.row("c-0000003", "EXECUTION")
    ledger.execute(
        'UPDATE events SET payload = replace(payload, "please", "PLEASE") WHERE "index" = ?',
        (intent["index"],),
    )
    ledger.execute('DELETE FROM events WHERE "index" = ?', (execution["index"],))
    code, out, _ = run(ledger)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("verify FAILED: ")
    assert f"FAIL index {intent['index']} c-0000003: digest_mismatch: " in out
    assert f"FAIL index {execution['index']}" in out and "index_gap: missing index" in out
    assert all(line.startswith(("FAIL ", "WARN ", "INFO ")) for line in lines[1:])
    assert f"{sum(1 for line in lines if line.startswith('FAIL'))} failure(s)" in lines[0]

    code, out, _ = run(ledger, as_json=True)
    body = json.loads(out)
    assert code == 1 and body["ok"] is False
    assert {"kind": "digest_mismatch", "index": intent["index"]}.items() <= body["failures"][0].items()


def test_scopes_are_named_in_the_summary(ledger: Ledger) -> None:
    code, out, _ = run(ledger, thread_id="thread-00001", since=3, until=20)
    assert code == 0
    assert out.startswith("verify OK (thread 'thread-00001', indexes 3..20): ")


def test_a_bad_context_config_exits_two(ledger: Ledger, tmp_path: Path) -> None:
    bad = tmp_path / "context.json"
    bad.write_text("{not json")
    out, err = io.StringIO(), io.StringIO()
    settings = ledger.settings(context_config_path=bad)
    code = verify_command(settings, thread_id=None, since=None, until=None, as_json=False, out=out, err=err)
    assert code == 2 and "not valid JSON" in err.getvalue() and out.getvalue() == ""


def test_progress_lines_go_to_stderr() -> None:
    err = io.StringIO()
    printer = ProgressPrinter(err, after_s=0, every_s=0)
    printer(50, 200)
    printer(150, 200)
    assert err.getvalue().splitlines() == [
        "verify: 25% (digests and chain 50/100 events, 0 s)",
        "verify: 75% (decisions and artifacts 50/100 events, 0 s)",
    ]
    quiet = io.StringIO()
    ProgressPrinter(quiet)(1, 2)  # short runs print nothing
    assert quiet.getvalue() == ""


def test_workers_and_cache_events_reach_verify(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    from turngate.audit.verification import verify_all as real

    seen: dict[str, object] = {}

    def spy(*args: object, **kw: object) -> object:
        seen.update(workers=kw.get("workers"), cache_events=kw.get("cache_events"))
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("turngate.audit.report.verify_all", spy)
    code, out, _ = run(ledger, workers=1, cache_events=3)
    assert code == 0 and out.startswith("verify OK")
    assert seen == {"workers": 1, "cache_events": 3}


def test_the_cli_flags_are_checked_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    from turngate.audit.verification.event_cache import MAX_CACHE_EVENTS, RECENT_EVENTS
    from turngate.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["verify", "--workers", "2", "--cache-events", "9000"])
    assert (args.workers, args.cache_events) == (2, 9000)
    assert parser.parse_args(["verify"]).cache_events is None  # verify_all's default
    for bad in (["--workers", "0"], ["--cache-events", "many"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["verify", *bad])
        assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["verify", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"default {MAX_CACHE_EVENTS:,}" in help_text and f"starts at {RECENT_EVENTS:,}" in help_text


ALLOW_ALL = "turngate.policies.allow_all"


def test_replay_policy_says_what_it_decided_again_and_what_not(ledger: Ledger) -> None:
    out, err = io.StringIO(), io.StringIO()
    settings = ledger.settings(policy_module=ALLOW_ALL)
    args = {"thread_id": None, "since": None, "until": None, "as_json": True, "out": out, "err": err}
    code = verify_command(settings, replay_policy=True, **args)
    body = json.loads(out.getvalue())
    assert code == 0, body["failures"]
    [scope] = [f for f in body["info"] if f["kind"] == "policy_replay_scope"]
    assert scope["detail"].startswith(f"--replay-policy decided 12 DECISION(s) again with {ALLOW_ALL}; ")
    assert "0 made by another policy identity" in scope["detail"]

    # Under another config that is not stored, nothing is decided again (and verify says so).
    out = io.StringIO()
    drifted = ledger.settings(policy_module=ALLOW_ALL, context_max_refs="7")
    code = verify_command(drifted, replay_policy=True, **{**args, "out": out})
    body = json.loads(out.getvalue())
    assert code == 3 and body["failures"] == [] and body["unchecked_decisions"] == 12
    [scope] = [f for f in body["info"] if f["kind"] == "policy_replay_scope"]
    assert "decided 0 DECISION(s) again" in scope["detail"]
    assert scope["detail"].endswith("12 not replayed: their context config could not be had")
