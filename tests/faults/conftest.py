"""Fixtures of the fault suite: real child processes (worker, API) against real misbehaving
servers on 127.0.0.1, and moto's S3 server (fake credentials, never real AWS)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.artifacts.conftest import CLEARED_AWS_ENV, FAKE_AWS_ENV


@pytest.fixture(scope="session")
def moto_server() -> Iterator[tuple[str, int]]:
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        for name in CLEARED_AWS_ENV:
            patch.delenv(name, raising=False)
        for name, value in FAKE_AWS_ENV.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            yield server.get_host_and_port()
        finally:
            server.stop()
