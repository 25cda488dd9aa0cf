"""verify_all split into index ranges in forked processes reports exactly what one process does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import turngate.audit.verify as audit_verify
from tests.audit.helpers import Ledger, config, make_ledger
from turngate.audit import AuditReport, verify_all


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    ledger = make_ledger(tmp_path_factory.mktemp("parallel") / "data", 40, threads=8, deny_every=6)
    yield ledger
    ledger.store.close()


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_verify, "can_fork", lambda: True)


def _same(report: AuditReport) -> dict[str, Any]:
    return report.model_dump(exclude={"duration_ms", "events_per_s"})


def _both(ledger: Ledger, workers: int, **kw: Any) -> tuple[AuditReport, AuditReport]:
    kw |= {"artifacts": ledger.artifacts(), "context_config": config()}
    return verify_all(ledger.store, workers=1, **kw), verify_all(ledger.store, workers=workers, **kw)


def _tampered(tmp_path: Path, pristine: Ledger) -> Ledger:
    """A copy of the module's ledger (tests tamper with theirs)."""
    import shutil

    shutil.copytree(pristine.data_dir, tmp_path / "data")
    copy = make_ledger(tmp_path / "data", 0)
    copy.built = pristine.built
    return copy


@pytest.mark.usefixtures("forking")
@pytest.mark.parametrize("workers", [2, 3, 7])
def test_an_untouched_ledger(pristine: Ledger, workers: int) -> None:
    one, many = _both(pristine, workers)
    assert one.ok and _same(one) == _same(many)
    assert many.checked_events == pristine.built.events


@pytest.mark.usefixtures("forking")
@pytest.mark.parametrize(
    "tamper",
    [
        'DELETE FROM events WHERE "index" IN (37, 38, 39)',  # around the boundaries of 3 parts
        'DELETE FROM events WHERE "index" = 0',
        "UPDATE events SET payload = replace(payload, 'summarise', 'summarize') WHERE \"index\" % 19 = 0",
        'UPDATE events SET prev_event_digest = NULL WHERE "index" = 38',
        "UPDATE events SET kind = 'BOGUS' WHERE \"index\" = 75",
    ],
)
def test_tampering_is_reported_the_same(tmp_path: Path, pristine: Ledger, tamper: str) -> None:
    ledger = _tampered(tmp_path, pristine)
    ledger.execute(tamper)
    for workers in (2, 3, 5):
        one, many = _both(ledger, workers)
        assert not one.ok
        assert _same(one) == _same(many), workers


@pytest.mark.usefixtures("forking")
def test_thread_and_range_scopes(pristine: Ledger) -> None:
    for scope in ({"thread_id": "thread-00003"}, {"since_index": 17, "until_index": 90}, {"since_index": 50}):
        one, many = _both(pristine, 3, **scope)
        assert one.ok and _same(one) == _same(many), scope


@pytest.mark.usefixtures("forking")
def test_a_failed_child_is_verified_here(
    tmp_path: Path, pristine: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = _tampered(tmp_path, pristine)
    ledger.execute("UPDATE events SET payload = replace(payload, 'previous', 'next') WHERE \"index\" = 100")

    def crash(*_args: Any) -> None:
        raise RuntimeError("the child died")

    monkeypatch.setattr(audit_verify, "_forked_part", crash)
    one, many = _both(ledger, 3)
    assert _same(one) == _same(many)
    assert [f.index for f in many.failures][:1] == [100]


def test_one_process_where_forking_is_unsafe(pristine: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_verify, "can_fork", lambda: False)
    monkeypatch.setattr(audit_verify, "run_forked", None)  # would raise if called
    report = verify_all(pristine.store, artifacts=pristine.artifacts(), context_config=config(), workers=4)
    assert report.ok
