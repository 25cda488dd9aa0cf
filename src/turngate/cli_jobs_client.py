"""The HTTP client behind `turngate jobs` and `turngate cases`: one method per case-job route.

Every refusal of the API (`{"ok": false, "reason_code", "detail"}`) becomes an :class:`ApiError`,
a server that cannot be reached an :class:`Unreachable`; nothing here prints.
"""

from __future__ import annotations

import mimetypes
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

# Mirrors turngate.jobs.models.FINAL_STATES (not imported: that module pulls in the provider SDKs).
FINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
JOB_TYPES: tuple[str, ...] = ("case.ingest", "case.embed", "case.index")

# Suffixes the platform's mimetypes table may not know.
_MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown"}
_REQUEST_TIMEOUT_S = 30.0


class ApiError(Exception):
    """The API refused a request (an HTTP status >= 400)."""

    def __init__(self, status: int, reason_code: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(f"{reason_code} (HTTP {status}): {detail}")
        self.status = status
        self.reason_code = reason_code
        self.detail = detail
        self.retry_after = retry_after

    def as_dict(self) -> dict[str, Any]:
        return {"ok": False, "status": self.status, "reason_code": self.reason_code, "detail": self.detail}


class Unreachable(Exception):
    """No HTTP answer at all: connection refused, DNS, timeout."""


def guess_media_type(path: Path) -> str | None:
    """The media type for a file name, or None when the suffix says nothing (the API then sniffs)."""
    return _MEDIA_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]


def new_correlation_id() -> str:
    return f"c-{uuid.uuid4().hex[:16]}"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds only; an HTTP date gives None)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _error_from(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
    except ValueError:
        body = None
    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
    if isinstance(body, dict) and body.get("reason_code"):
        return ApiError(resp.status_code, str(body["reason_code"]), str(body.get("detail", "")), retry_after)
    # Not the API's error shape (a proxy, a framework default): keep what there is.
    detail = body.get("detail") if isinstance(body, dict) else resp.text[:300]
    return ApiError(
        resp.status_code, f"http.{resp.status_code}", str(detail or resp.reason_phrase), retry_after
    )


class JobsClient:
    """`async with JobsClient(url, api_key) as api: await api.job("j-1")`."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=_REQUEST_TIMEOUT_S)

    async def __aenter__(self) -> JobsClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach turngate at {self.url}: {exc or type(exc).__name__}") from exc
        if resp.status_code >= 400:
            raise _error_from(resp)
        try:
            return resp.json()
        except ValueError as exc:
            raise ApiError(resp.status_code, "http.bad_body", f"not JSON: {resp.text[:200]!r}") from exc

    async def upload(self, path: Path, media_type: str | None) -> dict[str, Any]:
        """Store a file as an artifact; returns its pointer (passed on unchanged)."""
        headers = {"Content-Type": media_type or "application/octet-stream"}
        body = await self._call(
            "POST", "/artifacts", params={"name": path.name}, content=path.read_bytes(), headers=headers
        )
        return dict(body["artifact"])

    async def submit(self, intent_type: str, payload: dict[str, Any], correlation_id: str) -> dict[str, Any]:
        """Submit a case job (``POST /ingress/intent``); a retry passes the same ``correlation_id``."""
        envelope = {
            "interface_version": 3,
            "correlation_id": correlation_id,
            "payload": {"intent_type": intent_type, "payload": payload},
        }
        return dict(await self._call("POST", "/ingress/intent", json=envelope))

    async def list_jobs(self, job_type: str | None, open_only: bool, limit: int) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if job_type:
            params["type"] = job_type
        if open_only:
            params["open"] = "true"
        return list((await self._call("GET", "/jobs", params=params))["jobs"])

    async def job(self, job_id: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/jobs/{quote(job_id, safe='')}"))

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return dict(await self._call("DELETE", f"/jobs/{quote(job_id, safe='')}"))

    async def case(self, case_id: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/cases/{quote(case_id, safe='')}"))
