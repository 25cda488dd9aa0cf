"""A TLS-terminating TCP proxy on loopback in front of the (plaintext) Temporal dev server, the
way a self-hosted cluster's frontend with mTLS looks to a client: it requires a client
certificate signed by its CA (unless told otherwise) and speaks HTTP/2 (ALPN h2) for gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator

from tests.connection.certs import Pki


def server_context(pki: Pki, *, require_client_cert: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.set_alpn_protocols(["h2"])
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca_cert)
    return context


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class TlsProxy:
    """Runs its own event loop in a thread, so sync and async tests can both use it."""

    def __init__(self, upstream: str, context: ssl.SSLContext) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.context = context
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> asyncio.Server:
            return await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context)

        server = self._loop.run_until_complete(start())
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def tls_proxy(upstream: str, context: ssl.SSLContext) -> Iterator[TlsProxy]:
    proxy = TlsProxy(upstream, context)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
