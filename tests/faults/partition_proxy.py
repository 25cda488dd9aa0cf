"""A TCP proxy on 127.0.0.1 that the test can partition: the network fault of the fault tests.

``freeze()`` makes it a network that stops passing packets: every connection stays open, bytes
in flight are held, new connections are accepted and then hear nothing. ``heal()`` lets the held
bytes through, in order, on the same connections, as a network that comes back does (a client
that gave up meanwhile closed its end: that close is passed on too). Nothing fails fast, which
is the point: only the client's own timeouts end a call.

``freeze(replies_only=True)`` holds only what the upstream sends back: a request arrives and is
acted on, its answer is lost in the partition (the case where a client cannot know whether its
request took effect).

``cut()`` instead drops every connection (a network that resets them) and stays open.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class PartitionProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.connections = 0
        self.freezes = 0
        self._passing = threading.Event()  # client -> upstream
        self._passing.set()
        self._replying = threading.Event()  # upstream -> client
        self._replying.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=f"partition-proxy-{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def frozen(self) -> bool:
        return not (self._passing.is_set() and self._replying.is_set())

    def route(self, url: str) -> str:
        """``url`` (a database or HTTP URL naming the upstream) with its host:port this proxy's."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{self.address}" if userinfo else self.address
        return urlunsplit(parts._replace(netloc=netloc))

    def freeze(self, *, replies_only: bool = False) -> None:
        self.freezes += 1
        self._replying.clear()
        if not replies_only:
            self._passing.clear()

    def heal(self) -> None:
        self._passing.set()
        self._replying.set()

    def cut(self) -> None:
        with self._lock:
            held, self._open = self._open, set()
        for sock in held:
            _close(sock)

    def close(self) -> None:
        self._closed.set()
        _close(self._listener)
        self.heal()
        self.cut()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.add(client)
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._passing.wait()  # a partitioned network: the connection hears nothing
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.add(upstream)
        threading.Thread(target=self._pipe, args=(upstream, client, self._replying), daemon=True).start()
        self._pipe(client, upstream, self._passing)

    def _pipe(self, source: socket.socket, sink: socket.socket, gate: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                gate.wait()
                sink.sendall(chunk)
        gate.wait()  # the close is held as well, then passed on
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
