"""The bounds of the turn's external-refs activity (``resolve_external_refs``), in one place: the
workflow schedules it with them and the activity derives its inner timeouts from them.

Nested, each below the one around it: a Workbench fetch (``WORKBENCH_FETCH_TIMEOUT_MS``, cut to
what is left of the attempt) and a case query's embedding call (:data:`QUERY_EMBED_TIMEOUT`) end
before the attempt (:data:`ATTEMPT_TIMEOUT`), which ends before the whole activity with its
retries (:data:`SCHEDULE_TO_CLOSE_TIMEOUT`). The activity heartbeats while it runs, so a worker
that dies mid-fetch is noticed after :data:`HEARTBEAT_TIMEOUT`, not after the attempt.

Activity options are not part of what a replay checks: changing them here changes new turns only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

#: One attempt: index reads, Workbench fetches and the query embedding, all of them.
ATTEMPT_TIMEOUT = timedelta(seconds=15)
#: The activity, all attempts and the waits between them: the turn's DECISION is never later.
SCHEDULE_TO_CLOSE_TIMEOUT = timedelta(seconds=50)
#: A running attempt heartbeats several times within this.
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
#: The query embedder's own request timeout, whatever the index's embedder spec says.
QUERY_EMBED_TIMEOUT = timedelta(seconds=10)
#: Attempts (the last one records a transient fetch failure as a refusal instead of failing).
MAX_ATTEMPTS = 3
RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=2),
    maximum_attempts=MAX_ATTEMPTS,
)
