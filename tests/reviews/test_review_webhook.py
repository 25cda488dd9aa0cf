"""The review webhook activity against a real HTTP server on 127.0.0.1: the body, its
signature, and which answers are retried."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from temporalio.exceptions import ApplicationError

from turngate.activities.review_webhook import SIGNATURE_HEADER, ReviewWebhookActivities, signature
from turngate.workflows.shared import ReviewRequested

NOTICE = ReviewRequested(
    correlation_id="c-1",
    thread_id="th",
    turn_id="tu",
    tenant_id="t1",
    actor="alice",
    reason_codes=["policy.review_keyword"],
    role="review",
    four_eyes=True,
    requested_at="2026-01-01T00:00:00+00:00",
    deadline_at="2026-01-02T00:00:00+00:00",
)


class Receiver(ThreadingHTTPServer):
    status = 204
    received: list[tuple[dict[str, str], bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((dict(self.headers), body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(("127.0.0.1", 0), _Handler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _url(server: Receiver) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/hook"


async def test_the_notice_is_posted_and_signed(receiver: Receiver) -> None:
    await ReviewWebhookActivities(_url(receiver), "s3cret").notify_review(NOTICE)
    [(headers, body)] = receiver.received
    assert json.loads(body)["event"] == "review.requested" and json.loads(body)["correlation_id"] == "c-1"
    assert "message" not in json.loads(body)
    assert headers[SIGNATURE_HEADER] == signature("s3cret", body)


async def test_without_a_secret_nothing_is_signed(receiver: Receiver) -> None:
    await ReviewWebhookActivities(_url(receiver)).notify_review(NOTICE)
    assert SIGNATURE_HEADER not in receiver.received[0][0]


@pytest.mark.parametrize(("status", "retried"), [(503, True), (429, True), (400, False), (404, False)])
async def test_a_refusal_is_final_and_an_outage_is_retried(
    receiver: Receiver, status: int, retried: bool
) -> None:
    receiver.status = status
    with pytest.raises(ApplicationError) as raised:
        await ReviewWebhookActivities(_url(receiver)).notify_review(NOTICE)
    assert raised.value.non_retryable is not retried


async def test_no_url_is_a_no_op() -> None:
    await ReviewWebhookActivities(None).notify_review(NOTICE)
