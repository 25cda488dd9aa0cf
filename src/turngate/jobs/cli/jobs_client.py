"""The case-job routes behind `turngate jobs` and `turngate cases`, on :mod:`turngate.client`
(one HTTP client in the project): answers passed on as the API's JSON, nothing printed here.

Every refusal of the API is an :class:`ApiError` (``turngate.client.TurngateError``), a server
that cannot be reached an :class:`Unreachable`.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from types import TracebackType
from typing import Any

from turngate.client import AsyncTurngate, TurngateError, Unreachable, calls
from turngate.client.calls import FINAL_JOB_STATES, new_correlation_id

FINAL_STATES = FINAL_JOB_STATES
JOB_TYPES: tuple[str, ...] = ("case.ingest", "case.embed", "case.index")
ApiError = TurngateError

# Suffixes the platform's mimetypes table may not know.
_MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown"}
_REQUEST_TIMEOUT_S = 30.0

__all__ = ["FINAL_STATES", "JOB_TYPES", "ApiError", "JobsClient", "Unreachable", "new_correlation_id"]


def guess_media_type(path: Path) -> str | None:
    """The media type for a file name, or None when the suffix says nothing (the API then sniffs)."""
    return _MEDIA_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]


class JobsClient:
    """`async with JobsClient(url, api_key) as api: await api.job("j-1")`."""

    def __init__(self, url: str | None, api_key: str | None) -> None:
        # None: the client's own defaults (TURNGATE_URL / TURNGATE_API_KEY, else the local API).
        self._api = AsyncTurngate(url, api_key, timeout_s=_REQUEST_TIMEOUT_S)
        self.url = self._api.settings.url

    async def __aenter__(self) -> JobsClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._api.aclose()

    async def upload(self, path: Path, media_type: str | None) -> dict[str, Any]:
        """Store a file as an artifact; returns its pointer (passed on unchanged)."""
        body = await self._api.call(calls.upload(path.read_bytes(), name=path.name, media_type=media_type))
        return dict(body["artifact"])

    async def submit(self, intent_type: str, payload: dict[str, Any], correlation_id: str) -> dict[str, Any]:
        """Submit a case job (``POST /ingress/intent``); a retry passes the same ``correlation_id``."""
        return dict(await self._api.call(calls.submit_job(intent_type, payload, correlation_id)))

    async def list_jobs(self, job_type: str | None, open_only: bool, limit: int) -> list[dict[str, Any]]:
        return list((await self._api.call(calls.list_jobs(job_type, open_only, limit)))["jobs"])

    async def job(self, job_id: str) -> dict[str, Any]:
        return dict(await self._api.call(calls.job(job_id)))

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return dict(await self._api.call(calls.cancel_job(job_id)))

    async def case(self, case_id: str) -> dict[str, Any]:
        return dict(await self._api.call(calls.case(case_id)))
