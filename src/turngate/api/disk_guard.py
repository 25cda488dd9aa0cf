"""A full disk under the SQLite ledger as the API reports it: 503 ``ledger.disk_full``.

SQLite fails an append on a full disk cleanly ("database or disk is full": nothing is half
written, the worker's step retries until space returns), but a turn admitted then would wait
with its INTENT unrecorded. So the API looks first: when the ledger's filesystem has less than
``TURNGATE_LEDGER_MIN_FREE_BYTES`` free, a new intent is refused with 503 ``ledger.disk_full``
and ``Retry-After`` before anything is started or recorded, and ``/healthz`` says
``ledger: "disk_full"``. One warning when space runs short, one line when it is back. A
``statvfs`` costs microseconds, so every admission asks. PostgreSQL ledgers are not watched
here: their server reports its own disk (an append then fails as ``ledger.unavailable``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastapi.responses import JSONResponse
from sqlalchemy.engine import make_url

from turngate.api.error_responses import error_response
from turngate.api.ledger_outage import RETRY_AFTER_S

log = logging.getLogger(__name__)


def sqlite_ledger_dir(url: str) -> Path | None:
    """The directory holding a file-backed SQLite ledger (its WAL and journal too), else None."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser().absolute().parent


class LedgerDiskGuard:
    """Whether the SQLite ledger's filesystem has room for more turns (and one log line per
    change)."""

    def __init__(self, directory: Path | None, min_free_bytes: int) -> None:
        self._directory = directory
        self._min_free = min_free_bytes
        self.full = False
        self.free_bytes: int | None = None

    def has_room(self) -> bool:
        if self._directory is None or self._min_free <= 0:
            return True
        try:
            st = os.statvfs(self._directory)
        except OSError:
            return True  # a missing directory is the ledger's error to report, not this guard's
        self.free_bytes = st.f_bavail * st.f_frsize
        full = self.free_bytes < self._min_free
        if full != self.full:
            self.full = full
            if full:
                log.warning(
                    "ledger disk full: %d bytes free under %s (< %d); refusing new intents with 503 "
                    "ledger.disk_full until space returns",
                    self.free_bytes,
                    self._directory,
                    self._min_free,
                )
            else:
                log.warning(
                    "ledger disk has room again: %d bytes free under %s", self.free_bytes, self._directory
                )
        return not full

    def response(self) -> JSONResponse:
        response = error_response(
            503,
            "ledger.disk_full",
            f"the ledger's disk is full; nothing was recorded; retry after {RETRY_AFTER_S} s",
        )
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response
