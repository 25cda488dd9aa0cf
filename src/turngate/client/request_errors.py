"""What the client raises: the API's refusals with their reason code, and no answer at all."""

from __future__ import annotations

from typing import Any

import httpx


class TurngateError(Exception):
    """The API refused a request (HTTP status >= 400). ``reason_code`` is the documented code
    (docs/ERRORS.md); ``retry_after`` the seconds of a ``Retry-After`` header, if any."""

    def __init__(
        self,
        status: int,
        reason_code: str,
        detail: str,
        *,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{reason_code} (HTTP {status}): {detail}")
        self.status = status
        self.reason_code = reason_code
        self.detail = detail
        self.field = field
        self.retry_after = retry_after

    def as_dict(self) -> dict[str, Any]:
        return {"ok": False, "status": self.status, "reason_code": self.reason_code, "detail": self.detail}


class Unreachable(TurngateError):
    """No HTTP answer: connection refused, DNS failure, timeout (``reason_code``
    ``client.unreachable``, ``status`` 0)."""

    def __init__(self, url: str, cause: BaseException) -> None:
        detail = f"cannot reach turngate at {url}: {cause or type(cause).__name__}"
        super().__init__(0, "client.unreachable", detail)
        self.args = (detail,)  # str(exc) is the detail alone


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds only; an HTTP date gives None)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def error_from(response: httpx.Response) -> TurngateError:
    """The exception for a refused request, from the API's ``{ok, reason_code, detail}`` body
    (or, from a proxy or anything else, ``http.<status>``)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    if isinstance(body, dict) and body.get("reason_code"):
        return TurngateError(
            response.status_code,
            str(body["reason_code"]),
            str(body.get("detail", "")),
            field=body.get("field"),
            retry_after=retry_after,
        )
    detail = body.get("detail") if isinstance(body, dict) else response.text[:300]
    return TurngateError(
        response.status_code,
        f"http.{response.status_code}",
        str(detail or response.reason_phrase),
        retry_after=retry_after,
    )
