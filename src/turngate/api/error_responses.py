"""HTTP error bodies: always ``{ok: false, reason_code, detail}`` with a documented code."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from turngate.core.events import AdmissionError

# HTTP status per admission reason code (docs/ERRORS.md).
ADMISSION_STATUS = {
    "admission.malformed_json": 400,
    "admission.too_deep": 400,
    "admission.invalid_parent": 400,
    "admission.payload_too_large": 413,
    "admission.intent_too_large": 413,
    "admission.correlation_conflict": 409,
    "openai.too_many_messages": 413,
}


def admission_response(error: AdmissionError) -> JSONResponse:
    return JSONResponse(error.as_dict(), status_code=ADMISSION_STATUS.get(error.reason_code, 422))


def error_response(status: int, reason_code: str, detail: str) -> JSONResponse:
    return JSONResponse({"ok": False, "reason_code": reason_code, "detail": detail}, status_code=status)
