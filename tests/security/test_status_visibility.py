"""Where the infrastructure is, told to operators only. `/status`: Temporal's address, namespace
and missing search attributes are in an unscoped admin's answer, and in no other key's (a
tenant's reader or admin, or an unscoped reader), whose answers still follow the published
schema. `/healthz` (public): an outage is named without a host, port or database."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from sqlalchemy.engine import make_url

from tests.ledger.postgres import PostgresServer
from tests.security.conftest import bearer, make_key
from tests.stack import make_settings, running_stack
from turngate.devserver import DevServer
from turngate.schemas import STATUS_SCHEMA_VERSION, load_schema
from turngate.settings import Settings

INFRASTRUCTURE = {"address", "namespace", "missing_search_attributes"}


class _Proxy:
    """A loopback TCP proxy on threads of its own (the API opens its ledger synchronously on its
    event loop, so a proxy on that loop could not answer); :meth:`close` refuses new
    connections and cuts the open ones."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self._target))
                self._open += [client, upstream]
                for src, dst in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        self._listener.close()
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@contextlib.contextmanager
def _proxy(target_port: int) -> Iterator[_Proxy]:
    proxy = _Proxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("tenant", "roles", "operator"),
    [
        ("*", "admin", True),
        ("*", "snapshot.read", False),
        ("acme", "snapshot.read", False),
        ("acme", "admin", False),
        ("acme", "intent.write,snapshot.read", False),
    ],
)
async def test_only_an_operator_sees_where_temporal_is(
    secure_settings: Settings, temporal_server: DevServer, tenant: str, roles: str, operator: bool
) -> None:
    key = make_key(secure_settings, tenant, roles)
    validator = jsonschema.Draft202012Validator(load_schema(STATUS_SCHEMA_VERSION))
    async with running_stack(secure_settings, worker=False) as stack:
        answer = await stack.http.get("/status", headers=bearer(key))
    assert answer.status_code == 200, answer.text
    status = answer.json()
    validator.validate(status)
    assert status["temporal"]["reachable"] is True
    host, _, port = temporal_server.address.rpartition(":")
    if operator:
        assert set(status["temporal"]) >= INFRASTRUCTURE
        assert status["temporal"]["address"] == temporal_server.address
    else:
        assert set(status["temporal"]) == {"reachable"}
        assert f"{host}:{port}" not in answer.text


async def test_healthz_names_no_host_port_or_database_when_the_ledger_is_down(
    tmp_path: Path, temporal_server: DevServer, postgres_server: PostgresServer
) -> None:
    # /healthz is public: during an outage it says what is down, never where (the database
    # driver's error names the host, the port and the database; it goes to the log).
    with postgres_server.fresh_database() as url, _proxy(make_url(url).port or 5432) as proxy:
        direct = make_url(url)
        port = proxy.port
        proxied = direct.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        settings = make_settings(tmp_path, temporal_server.address, ledger_url=proxied, auth_mode="keys")
        async with running_stack(settings, worker=False) as stack:
            assert (await stack.http.get("/healthz")).status_code == 200
            proxy.close()  # new connections refused, open ones cut
            for _ in range(100):  # a read already under way may still finish
                down = await stack.http.get("/healthz")
                if down.status_code != 200:
                    break
                await asyncio.sleep(0.1)
            assert down.status_code == 503, down.text
            assert (down.json()["reason_code"], down.json()["ledger"]) == ("ledger.unavailable", "down")
            for secret in (str(port), "127.0.0.1", str(direct.database)):
                assert secret not in down.text, down.text
