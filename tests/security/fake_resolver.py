"""A tiny Workbench resolver on 127.0.0.1 for the guarded-fetch tests (real HTTP, one thread)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from turngate.security.workbench import DEFAULT_DENY_NETWORKS

#: The default deny-list without loopback, so that tests may fetch from this resolver on
#: 127.0.0.1 (the default refuses it: tests/security/test_workbench_fetch.py).
LOOPBACK = ("127.0.0.0/8", "::1/128")
LOOPBACK_ALLOWED: tuple[str, ...] = tuple(n for n in DEFAULT_DENY_NETWORKS if n not in LOOPBACK)
#: The same, as WORKBENCH_DENY_NETWORKS.
LOOPBACK_ALLOWED_ENV = ",".join(LOOPBACK_ALLOWED)


class _Handler(BaseHTTPRequestHandler):
    server: FakeResolver

    def log_message(self, *_args: object) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self.server.seen_auth.append(self.headers.get("Authorization"))
        self.server.seen_host.append(self.headers.get("Host"))
        name = self.path.rsplit("/", 1)[-1]
        if name == "ok":
            self._send(200, b"hello from the workbench", "text/plain; charset=utf-8")
        elif name == "html":
            self._send(200, b"<p>hi</p>", "text/html")
        elif name == "big-declared":
            self._send(200, b"x" * 5000, "text/plain")
        elif name == "big-streamed":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(10):
                chunk = b"y" * 1000
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif name == "slow":
            time.sleep(2)
            self._send(200, b"late", "text/plain")
        elif name == "redirect-same":
            self._redirect(f"http://127.0.0.1:{self.server.server_port}/h/ok")
        elif name == "redirect-bad-port":
            self._redirect("http://127.0.0.1:99999/h/ok")
        elif name == "redirect-other":
            self._redirect(f"http://localhost:{self.server.server_port}/h/ok")
        elif name == "missing":
            self._send(404, b"no", "text/plain")
        else:
            self._send(500, b"?", "text/plain")

    def _send(self, status: int, body: bytes, media_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


class FakeResolver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen_auth: list[str | None] = []
        self.seen_host: list[str | None] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/h"

    def handle_error(self, request: object, client_address: object) -> None:
        # turngate hanging up mid-body (too large, timeout) is what those tests expect
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def fake_resolver() -> Iterator[FakeResolver]:
    server = FakeResolver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
