"""A ledger outage as the API reports it: 503 ``ledger.unavailable``, one log line each way.

Any request path that reads the ledger (correlation and parent checks, key lookup, /snapshot,
/status, /verify, the UI API) may hit a database that is down or restarting. The app turns
:class:`LedgerUnavailableError` into ``503 ledger.unavailable`` with ``Retry-After`` (nothing was
started or recorded by that request; retrying is safe). The first failure logs one warning and
starts a probe that reads the ledger head every second until it answers, then logs one line that
it is back: a hundred refused requests during an outage make two log lines, not a hundred
tracebacks. ``/healthz`` (readiness) says ``ledger: down`` while the outage lasts. Once an
outage is known, new intents and ``/healthz`` are refused at once (the probe ends it): on a
silent network each ledger call would otherwise hold a thread for the ledger's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from fastapi.responses import JSONResponse

from turngate.api.error_responses import error_response
from turngate.ledger import LedgerUnavailableError

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying a request refused during an outage.
RETRY_AFTER_S = 2
PROBE_INTERVAL_S = 1.0


class LedgerOutage:
    """Whether this API process currently sees its ledger as down (and since when)."""

    def __init__(self, probe: Callable[[], object], *, probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self._probe = probe
        self._interval = probe_interval_s
        self._task: asyncio.Task[None] | None = None
        self.down_since: float | None = None
        self.detail = ""

    def failed(self, exc: BaseException) -> None:
        """A ledger read failed: the first failure of an outage logs and starts the probe."""
        self.detail = str(exc)
        if self.down_since is not None:
            return
        self.down_since = time.monotonic()
        log.warning("ledger unavailable, answering 503 ledger.unavailable until it recovers: %s", exc)
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="ledger-outage-probe")

    def recovered(self) -> None:
        if self.down_since is None:
            return
        log.warning("ledger available again after %.1f s", time.monotonic() - self.down_since)
        self.down_since = None
        self.detail = ""

    async def _watch(self) -> None:
        while self.down_since is not None:
            await asyncio.sleep(self._interval)
            try:
                await asyncio.to_thread(self._probe)
            except LedgerUnavailableError as exc:
                self.detail = str(exc)
                continue
            self.recovered()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def response(self) -> JSONResponse:
        response = error_response(
            503,
            "ledger.unavailable",
            f"the ledger cannot be read or written right now; retry after {RETRY_AFTER_S} s "
            "(a resubmitted turn is never run twice)",
        )
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response
