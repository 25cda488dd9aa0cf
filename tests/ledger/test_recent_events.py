"""The API's ledger watcher keeps the events it last read in memory, and /tail serves subscribers
near the head from there: the same events, filtered by tenant, stream and lanes exactly as the
ledger's own reads filter them, and a clear "read the ledger" when memory no longer holds them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.ledger.helpers import draft
from turngate.api.watcher import RECENT_EVENTS, LedgerWatcher, TurnKey
from turngate.core.events import Event, EventKind
from turngate.ledger import LedgerStore
from turngate.ledger.rows import event_matches

HANG_S = 30.0


def _append(store: LedgerStore, n: int, *, offset: int = 0) -> None:
    """``n`` INTENTs over two tenants (and one unscoped), two streams and two lanes."""
    drafts = []
    for i in range(offset, offset + n):
        tenant = ("tenant-a", "tenant-b", None)[i % 3]
        base = draft(
            f"c-{i}",
            thread_id=f"t-{i}",
            stream_id=("default", "s2")[i % 2],
            lane=("user_chat", "x")[i % 4 // 2],
        )
        drafts.append(base.model_copy(update={"tenant_id": tenant}))
    for d in drafts:
        store.append(d)


async def _caught_up(watcher: LedgerWatcher, last_index: int) -> None:
    """Until the watcher has read up to ``last_index`` (it reads while somebody waits)."""

    async def wait() -> None:
        while watcher.read_up_to is None or watcher.read_up_to < last_index:
            await watcher.wait_change(watcher.generation, 0.05)

    await asyncio.wait_for(wait(), HANG_S)


@pytest.fixture
async def watching(store: LedgerStore) -> AsyncIterator[LedgerWatcher]:
    watcher = LedgerWatcher(store, poll_interval_s=0.002)
    watcher.start()
    try:
        await _caught_up(watcher, -1)  # it knows the (empty) ledger's head before events come
        yield watcher
    finally:
        await watcher.stop()


FILTERS = [
    {"tenant_id": None, "stream_id": None, "lanes": None},
    {"tenant_id": "tenant-a", "stream_id": None, "lanes": None},
    {"tenant_id": "tenant-b", "stream_id": "s2", "lanes": None},
    {"tenant_id": None, "stream_id": None, "lanes": ["x"]},
    {"tenant_id": "tenant-a", "stream_id": "default", "lanes": ["user_chat", "x"]},
    {"tenant_id": "nobody", "stream_id": None, "lanes": None},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "-".join(str(v) for v in f.values()))
async def test_memory_selects_what_the_ledger_selects(
    store: LedgerStore, watching: LedgerWatcher, filters: dict[str, Any]
) -> None:
    _append(store, 24)
    await _caught_up(watching, 23)
    served = watching.recent_since(-1, 1000, lambda e: event_matches(e, **filters))
    assert served is not None
    from_memory, cursor = served
    assert [e.index for e in from_memory] == [e.index for e in store.since(-1, limit=1000, **filters)]
    assert cursor == 23  # everything read is behind the subscriber, matched or not


async def test_a_tenant_never_sees_another_tenants_events_from_memory(
    store: LedgerStore, watching: LedgerWatcher
) -> None:
    _append(store, 9)
    await _caught_up(watching, 8)
    served = watching.recent_since(
        -1, 1000, lambda e: event_matches(e, stream_id=None, lanes=None, tenant_id="tenant-b")
    )
    assert served is not None
    assert served[0] and {e.tenant_id for e in served[0]} == {"tenant-b"}


async def test_limit_and_cursors(store: LedgerStore, watching: LedgerWatcher) -> None:
    _append(store, 10)
    await _caught_up(watching, 9)
    served = watching.recent_since(-1, 1000, lambda _e: True)
    assert served is not None
    every: list[Event] = served[0]
    assert [e.index for e in every] == list(range(10))
    # at the limit: the cursor is the last event handed out, the rest comes next time
    assert watching.recent_since(-1, 3, lambda _e: True) == (every[:3], 2)
    assert watching.recent_since(2, 3, lambda _e: True) == (every[3:6], 5)
    # at the head and past it: nothing new (what follows comes with the next change)
    assert watching.recent_since(9, 3, lambda _e: True) == ([], 9)
    assert watching.recent_since(50, 3, lambda _e: True) == ([], 50)


async def test_before_the_watcher_read_the_head_memory_answers_nothing(store: LedgerStore) -> None:
    _append(store, 3)
    watcher = LedgerWatcher(store)  # not started: where the ledger stands is unknown
    assert watcher.recent_since(-1, 10, lambda _e: True) is None
    assert watcher.recent_since(5, 10, lambda _e: True) is None


async def test_events_from_before_the_watcher_started_are_read_from_the_ledger(store: LedgerStore) -> None:
    _append(store, 3)  # indexes 0..2, before the watcher starts
    watcher = LedgerWatcher(store, poll_interval_s=0.002)
    watcher.start()
    try:
        await _caught_up(watcher, 2)  # the watcher has read the head (index 2) before we go on
        _append(store, 2, offset=3)
        await _caught_up(watcher, 4)
        assert watcher.recent_since(1, 10, lambda _e: True) is None  # index 2 is not in memory
        assert watcher.recent_since(2, 10, lambda _e: True) == (store.since(2, limit=10), 4)
    finally:
        await watcher.stop()


@pytest.mark.backends("sqlite", reason="the memory bound does not depend on the backend")
@pytest.mark.parametrize(
    ("behind", "in_memory"),
    [(RECENT_EVENTS - 1, True), (RECENT_EVENTS, True), (RECENT_EVENTS + 1, False)],
    ids=["just-under", "at", "just-over"],
)
async def test_memory_holds_the_last_recent_events(
    store: LedgerStore, watching: LedgerWatcher, behind: int, in_memory: bool
) -> None:
    """A subscriber ``behind`` events behind the head: served from memory up to RECENT_EVENTS."""
    total = RECENT_EVENTS + 1
    _append(store, total)
    await _caught_up(watching, total - 1)
    served = watching.recent_since(total - 1 - behind, 10_000, lambda _e: True)
    assert (served is not None) is in_memory
    if served is not None:
        assert [e.index for e in served[0]] == list(range(total - behind, total))


# ------------------------------------------------------------ a wait that goes on from another


def _turn(store: LedgerStore, cid: str, kinds: list[EventKind]) -> None:
    for kind in kinds:
        store.append(
            draft(
                cid,
                kind,
                thread_id=f"t-{cid}",
                payload={"decision": "ALLOW"} if kind == EventKind.DECISION else None,
            )
        )


def _key(cid: str) -> TurnKey:
    return (None, "default", f"t-{cid}", cid)


def _has(kind: str) -> Callable[[dict[str, Event]], bool]:
    return lambda found: kind in found


async def test_a_later_wait_goes_on_from_an_earlier_one_without_reading_the_turn_again(
    store: LedgerStore, watching: LedgerWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first wait reads the turn (INTENT); the second gets the DECISION and EXECUTION
    appended between and after the two waits from memory, never from a read of the turn."""
    _turn(store, "c-1", [EventKind.INTENT])
    first = await watching.wait_admitted(_key("c-1"), "c-1", _has("INTENT"), HANG_S)
    assert first.done and first.read_up_to is not None
    _turn(store, "c-1", [EventKind.DECISION])  # while nobody waits for the turn
    await _caught_up(watching, 1)
    _turn(store, "c-2", [EventKind.INTENT])  # another turn's event in between

    def no_read(*_args: object, **_kw: object) -> None:
        raise AssertionError("the turn was read from the ledger again")

    monkeypatch.setattr(watching, "_read", no_read)
    second = asyncio.create_task(watching.wait_turn(_key("c-1"), _has("EXECUTION"), HANG_S, after=first))
    await asyncio.sleep(0.05)
    _turn(store, "c-1", [EventKind.EXECUTION])
    events, done = await second
    assert done and sorted(events) == ["DECISION", "EXECUTION", "INTENT"]
    assert {e.correlation_id for e in events.values()} == {"c-1"}


async def test_an_earlier_wait_memory_no_longer_covers_reads_the_turn(
    store: LedgerStore, watching: LedgerWatcher
) -> None:
    _turn(store, "c-1", [EventKind.INTENT])
    first = await watching.wait_admitted(_key("c-1"), "c-1", _has("INTENT"), HANG_S)
    _turn(store, "c-1", [EventKind.DECISION])
    _append(store, RECENT_EVENTS + 1, offset=100)  # the DECISION falls out of memory
    await _caught_up(watching, RECENT_EVENTS + 2)
    events, done = await watching.wait_turn(_key("c-1"), _has("DECISION"), HANG_S, after=first)
    assert done and sorted(events) == ["DECISION", "INTENT"]
