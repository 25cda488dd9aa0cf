"""verify_all split into index ranges in forked processes reports exactly what one process does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import turngate.audit.forked_ranges as forked_ranges
import turngate.audit.verification.event_cache as event_cache
import turngate.audit.verification.event_checks as event_checks
from tests.audit.helpers import Ledger, config, make_ledger
from turngate.audit import AuditReport, verify_all
from turngate.audit.forked_ranges import RangeBoard


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    ledger = make_ledger(tmp_path_factory.mktemp("parallel") / "data", 40, threads=8, deny_every=6)
    yield ledger
    ledger.store.close()


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked_ranges, "can_fork", lambda: True)


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

    monkeypatch.setattr(forked_ranges, "child_ranges", crash)
    one, many = _both(ledger, 3)
    assert _same(one) == _same(many)
    assert [f.index for f in many.failures][:1] == [100]


def test_one_process_where_forking_is_unsafe(pristine: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked_ranges, "can_fork", lambda: False)
    monkeypatch.setattr(forked_ranges, "run_forked", None)  # would raise if called
    report = verify_all(pristine.store, artifacts=pristine.artifacts(), context_config=config(), workers=4)
    assert report.ok


# ---- work stealing: a process that is done takes the upper half of the largest range left


def test_the_board_hands_out_upper_halves_above_what_was_claimed() -> None:
    board = RangeBoard([(None, 99), (100, 199)], min_steal=10)
    assert board.first(0) == (0, None, 99) and board.first(1) == (1, 100, 199)
    assert board.claim(1, 119) == 199  # the owner of 100..199 checks 100..119 first
    board.finish(0)  # range 0 is done: the thief takes half of what range 1 has not claimed
    assert board.steal(0) == (2, 160, 199)
    assert board.claim(1, 169) == 159  # its owner stops at 159 now
    assert board.ranges_of(0) == [(0, None, 99), (2, 160, 199)]
    assert board.ranges_of(1) == [(1, 100, 159)]
    board.finish(1)
    assert board.claim(2, 189) == 199
    assert board.steal(1) is None  # 10 unclaimed indexes: under twice min_steal


def test_the_board_stops_at_its_capacity() -> None:
    board = RangeBoard([(None, 10_000)], min_steal=1, capacity=3)
    assert board.steal(1) is not None and board.steal(1) is not None
    assert board.steal(1) is None


@pytest.fixture
def slow_children(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None, int]]:
    """Children that start late (so this process takes from their ranges), and a record of
    every range this process took."""
    taken: list[tuple[int, int | None, int]] = []
    late = forked_ranges.child_ranges
    steal = RangeBoard.steal

    def start_late(*args: Any) -> Any:
        time.sleep(1.0)
        return late(*args)

    def recorded(self: RangeBoard, owner: int) -> Any:
        got = steal(self, owner)
        if got is not None and owner == 0:
            taken.append(got)
        return got

    monkeypatch.setattr(forked_ranges, "child_ranges", start_late)
    monkeypatch.setattr(RangeBoard, "steal", recorded)
    return taken


@pytest.mark.usefixtures("forking")
@pytest.mark.parametrize(
    "tamper",
    [
        None,
        "UPDATE events SET payload = replace(payload, 'summarise', 'summarize') WHERE \"index\" % 13 = 0",
        'DELETE FROM events WHERE "index" IN (70, 71)',
    ],
)
def test_ranges_taken_from_a_slow_process_report_the_same(
    tmp_path: Path, pristine: Ledger, slow_children: list[Any], tamper: str | None
) -> None:
    ledger = _tampered(tmp_path, pristine)
    if tamper:
        ledger.execute(tamper)
    seen: list[tuple[int, int]] = []
    one, many = _both(ledger, 2, batch_size=4, progress=lambda done, total: seen.append((done, total)))
    assert slow_children, "this process took no range from the slow one"
    assert _same(one) == _same(many)
    assert one.ok is (tamper is None)
    total = 2 * many.checked_events
    assert seen[-1] == (total, total) and all(done <= total for done, _ in seen)


@pytest.mark.parametrize(
    "tamper",
    [
        None,
        "UPDATE events SET payload = replace(payload, 'previous', 'next') WHERE \"index\" % 11 = 0",
        'DELETE FROM events WHERE "index" IN (40, 41)',
        "UPDATE events SET kind = 'BOGUS' WHERE \"index\" = 60",
    ],
)
def test_a_small_cache_reports_the_same(tmp_path: Path, pristine: Ledger, tamper: str | None) -> None:
    """Events that fell out of the cache are read from the ledger again: the same findings."""
    ledger = _tampered(tmp_path, pristine)
    if tamper:
        ledger.execute(tamper)
    kw: dict[str, Any] = {"artifacts": ledger.artifacts(), "context_config": config(), "workers": 1}
    roomy = verify_all(ledger.store, **kw)
    assert roomy.ok is (tamper is None)
    for cache_events in (0, 1, 7):
        small = verify_all(ledger.store, cache_events=cache_events, batch_size=5, **kw)
        assert _same(small) == _same(roomy), cache_events
    with pytest.raises(ValueError, match="cache_events"):
        verify_all(ledger.store, cache_events=-1, **kw)


def test_the_cache_grows_while_refs_reach_past_it() -> None:
    cache = event_cache.EventCache(4, grow_to=16)
    cache._grow_for(3)
    assert cache.limit == 4  # it holds that far back
    cache._grow_for(20)
    assert cache.limit == 4  # no size up to 16 would hold that row
    cache._grow_for(6)
    assert cache.limit == 8
    cache._grow_for(12)
    assert cache.limit == 16 and cache.digest_limit >= 16


def test_a_growing_cache_reports_the_same(
    tmp_path: Path, pristine: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = _tampered(tmp_path, pristine)
    ledger.execute("UPDATE events SET payload = replace(payload, 'previous', 'next') WHERE \"index\" = 90")
    kw: dict[str, Any] = {"artifacts": ledger.artifacts(), "context_config": config(), "workers": 1}
    roomy = verify_all(ledger.store, **kw)
    grown: list[int] = []
    grow = event_cache.EventCache._grow_for

    def recorded(self: Any, reach: int) -> None:
        before = self.limit
        grow(self, reach)
        if self.limit != before:
            grown.append(self.limit)

    monkeypatch.setattr(event_checks, "RECENT_EVENTS", 4)
    monkeypatch.setattr(event_cache.EventCache, "_grow_for", recorded)
    small = verify_all(ledger.store, cache_events=64, batch_size=5, **kw)
    assert grown and max(grown) <= 64
    assert _same(small) == _same(roomy) and not small.ok
