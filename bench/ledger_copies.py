"""Grow a built ledger k-fold by SQL copies of its events (for read benchmarks only).

Building a 1,000,000-turn ledger turn by turn (:func:`bench.verify.build_ledger`: real DECISIONs,
a manifest per event) takes the better part of an hour on a busy 2-core machine. The read paths
do not care how rows were made, so the large size is the built one plus ``copies - 1`` copies of
its events appended by ``INSERT ... SELECT``: indexes continue the log without gaps, and thread,
turn and correlation ids get a ``~<copy>`` suffix (new threads, same shapes and sizes, same
payloads). The copies' digests and chain links are the originals', so ``verify`` reports them
(reads never check digests); the original part still verifies.

Rows inserted this way bypass the store, so the read summaries do not include them: the bench
then runs the summary migration (what an existing ledger gets), which is the backfill it times.
"""

from __future__ import annotations

from sqlalchemy import text

from turngate.ledger import LedgerStore

COPY_SUFFIX = "~"

_COLUMNS = (
    '"index", kind, thread_id, turn_id, parent_turn_id, correlation_id, stream_id, lane, actor, '
    "intent_type, payload, digest, prev_event_digest, created_at, tenant_id"
)


def _renamed(column: str) -> str:
    return f"{column} || '{COPY_SUFFIX}' || :copy"


def copy_events(store: LedgerStore, copies: int) -> int:
    """Append ``copies - 1`` copies of every event in ``store``; the new number of events."""
    base = store.head()[0]
    select_copy = (
        f'SELECT "index" + :shift, kind, {_renamed("thread_id")}, {_renamed("turn_id")}, '
        f"CASE WHEN parent_turn_id IS NULL THEN NULL ELSE {_renamed('parent_turn_id')} END, "
        f"{_renamed('correlation_id')}, stream_id, lane, actor, intent_type, payload, digest, "
        'prev_event_digest, created_at, tenant_id FROM events WHERE "index" < :base ORDER BY "index"'
    )
    for copy in range(1, copies):
        with store.engine.begin() as conn:
            conn.execute(
                text(f"INSERT INTO events ({_COLUMNS}) {select_copy}"),
                {"shift": copy * base, "copy": str(copy), "base": base},
            )
    return store.head()[0]


def thread_name(base_threads: int, n: int) -> str:
    """The name of thread ``n`` of the grown ledger (as :func:`bench.verify.build_ledger` and
    :func:`copy_events` named it)."""
    copy, number = divmod(n, base_threads)
    return f"thread-{number:05d}" + (f"{COPY_SUFFIX}{copy}" if copy else "")


def turn_name(base_turns: int, n: int) -> str:
    copy, number = divmod(n, base_turns)
    return f"c-{number:07d}" + (f"{COPY_SUFFIX}{copy}" if copy else "")
