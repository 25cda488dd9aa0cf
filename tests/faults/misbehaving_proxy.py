"""A TCP proxy on 127.0.0.1 that misbehaves on command: the real misbehaving server of the fault
tests. In front of moto's S3 server (or any TCP server) it either forwards, accepts and never
answers (``stall``), or answers every HTTP request with a 500 (``error500``). Changing the mode
drops the connections it holds, so a client's kept-alive connection cannot outlive a mode. While
forwarding, ``cut_on`` (bytes) drops any connection whose client sends them: a database that
fails exactly the query that carries, say, ``turn_id = `` in its text.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Literal

Mode = Literal["forward", "stall", "error500"]

_S3_500 = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


class MisbehavingProxy:
    def __init__(self, upstream: tuple[str, int], mode: Mode = "forward") -> None:
        self.upstream = upstream
        self.mode: Mode = mode
        self.connections = 0
        self.errors_sent = 0
        self.cut_on: bytes | None = None
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            held, self._open = self._open, set()
        for sock in held:
            _close(sock)

    def close(self) -> None:
        self._closed.set()
        _close(self._listener)
        self.set_mode("forward")

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                mode = self.mode
                self._open.add(client)
            target = {"forward": self._forward, "stall": self._stall, "error500": self._error500}[mode]
            threading.Thread(target=target, args=(client,), daemon=True).start()

    def _stall(self, client: socket.socket) -> None:
        """Accept and never answer: read (and drop) whatever comes until the peer gives up."""
        with contextlib.suppress(OSError):
            while client.recv(65536):
                pass
        _close(client)

    def _error500(self, client: socket.socket) -> None:
        """Answer each HTTP request on the connection with an S3-style 500."""
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(buffer) < length:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                buffer = buffer[length:]
                with self._lock:
                    self.errors_sent += 1
                client.sendall(
                    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/xml\r\n"
                    + f"content-length: {len(_S3_500)}\r\n\r\n".encode()
                    + _S3_500
                )
        _close(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.add(upstream)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream, self._cut)

    def _cut(self, chunk: bytes) -> bool:
        if self.cut_on is None or self.cut_on not in chunk:
            return False
        with self._lock:
            self.cuts += 1
        return True


def _pipe(source: socket.socket, sink: socket.socket, cut: Callable[[bytes], bool] = lambda _: False) -> None:
    with contextlib.suppress(OSError):
        while (chunk := source.recv(65536)) and not cut(chunk):
            sink.sendall(chunk)
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
