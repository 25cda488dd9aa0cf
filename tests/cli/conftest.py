"""One fake case-job API on 127.0.0.1 for the CLI tests (reset before each test), and a runner
that parses a `turngate ...` command line with the real parser and awaits its command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from tests.cli.fake_api import API_KEY, FakeJobsApi
from turngate.cli import _uvicorn_server, build_parser
from turngate.devserver import free_port


@dataclass
class Outcome:
    code: int
    out: str
    err: str


Run = Callable[..., Awaitable[Outcome]]


@pytest.fixture(scope="session")
async def fake_server() -> AsyncIterator[tuple[FakeJobsApi, str]]:
    fake = FakeJobsApi()
    port = free_port()
    server = _uvicorn_server(fake.app, "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    yield fake, f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture
def fake_api(fake_server: tuple[FakeJobsApi, str]) -> FakeJobsApi:
    fake_server[0].reset()
    return fake_server[0]


@pytest.fixture
def run(fake_server: tuple[FakeJobsApi, str], capsys: pytest.CaptureFixture[str]) -> Run:
    """``await run("jobs", "show", "j-1")``: exit code and captured output of one command."""

    async def run_command(*argv: str, url: str | None = None, api_key: str = API_KEY) -> Outcome:
        capsys.readouterr()
        args = build_parser().parse_args([*argv, "--url", url or fake_server[1], "--api-key", api_key])
        code = await args.run(args)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run_command
