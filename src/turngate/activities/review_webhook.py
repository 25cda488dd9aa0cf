"""The review webhook: tell a team's tool that a turn waits for a reviewer (docs/REVIEWS.md).

One POST of :class:`~turngate.workflows.shared.ReviewRequested` as JSON to
``TURNGATE_REVIEW_WEBHOOK_URL``; with ``TURNGATE_REVIEW_WEBHOOK_SECRET`` the body is signed,
``X-Turngate-Signature: sha256=<hex HMAC-SHA256 of the body>``. A failed delivery (no answer,
a 5xx, a 429) is retried by Temporal a few times; a 4xx is final. The turn waits for its verdict
either way: the webhook is a notice, the review itself is in the API.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.workflows.shared import ReviewRequested
from turngate.workflows.turn_activities import NOTIFY_REVIEW

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
SIGNATURE_HEADER = "X-Turngate-Signature"


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class ReviewWebhookActivities:
    def __init__(self, url: str | None, secret: str | None = None) -> None:
        self._url = url
        self._secret = secret

    @activity.defn(name=NOTIFY_REVIEW)
    async def notify_review(self, inp: ReviewRequested) -> None:
        if not self._url:
            return  # configured off since the turn started: nothing to tell
        body = json.dumps(inp.model_dump(mode="json"), sort_keys=True).encode()
        headers = {"Content-Type": "application/json"}
        if self._secret:
            headers[SIGNATURE_HEADER] = signature(self._secret, body)
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            response = await http.post(self._url, content=body, headers=headers)
        if response.status_code < 300:
            return
        final = 400 <= response.status_code < 500 and response.status_code not in (408, 429)
        raise ApplicationError(
            f"the review webhook answered HTTP {response.status_code}",
            type="review.webhook_refused" if final else "review.webhook_unavailable",
            non_retryable=final,
        )
