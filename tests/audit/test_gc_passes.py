"""verify_all runs with raised collector thresholds and leaves the process's own as they were."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from turngate.audit import verify_all
from turngate.audit.gc_passes import VERIFY_GC_THRESHOLDS, fewer_gc_passes, with_fewer_gc_passes


@pytest.fixture(autouse=True)
def thresholds_restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_raised_inside_and_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_gc_passes():
        assert gc.get_threshold() == VERIFY_GC_THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_block_raises() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_gc_passes():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowered_and_a_disabled_collector_stays_disabled() -> None:
    gc.set_threshold(500_000, 10, 1_000)
    with fewer_gc_passes():
        assert gc.get_threshold() == (500_000, 50, 1_000)
    gc.set_threshold(0)
    with fewer_gc_passes():
        assert gc.get_threshold()[0] == 0


def test_verify_all_is_wrapped() -> None:
    assert verify_all.__wrapped__ is not None  # type: ignore[attr-defined]
    seen: list[tuple[int, int, int]] = []
    probe = with_fewer_gc_passes(lambda: seen.append(gc.get_threshold()))
    gc.set_threshold(700, 10, 10)
    probe()
    assert seen == [VERIFY_GC_THRESHOLDS] and gc.get_threshold() == (700, 10, 10)
