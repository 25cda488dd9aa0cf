"""A started service freezes its start-up objects and collects its young generation less often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from turngate.service_gc import YOUNG_THRESHOLD, settle_after_start


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_settling_freezes_what_exists_and_raises_only_the_young_threshold() -> None:
    _, middle, old = gc.get_threshold()
    kept = [object() for _ in range(10)]
    settle_after_start()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    settle_after_start()  # again: nothing changes but what it froze
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)


@pytest.mark.usefixtures("restored_gc")
def test_garbage_left_at_start_is_collected_not_frozen() -> None:
    class Cycle:
        other: Cycle

    def make() -> weakref.ref[Cycle]:
        first, second = Cycle(), Cycle()
        first.other, second.other = second, first
        return weakref.ref(first)

    gc.disable()  # no collection of its own may come first
    try:
        left = make()
        assert left() is not None
        settle_after_start()
        assert left() is None
    finally:
        gc.enable()
