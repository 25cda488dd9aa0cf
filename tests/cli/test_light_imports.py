"""Each `turngate` command imports what it uses: `--help` and a `chat` round trip load no Temporal,
SQL, web server, telemetry, SDK or pydantic module (their start-up cost is measured by
bench/cli_start.py; here only what is loaded is checked, never a time).

Each command line runs in a fresh interpreter that writes the names of the modules it loaded
when the command line ends (through os._exit, as `turngate` always does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import turngate
from tests.cli.fake_api import API_KEY, FakeJobsApi

SRC = Path(turngate.__file__).resolve().parents[1]  # the turngate under test, in every interpreter
#: What no command needs to print its help or to send a message: servers, storage, workflows,
#: telemetry, provider SDKs, and pydantic (the chat client passes the API's JSON on as it is).
HEAVY = (
    "alembic",
    "anthropic",
    "boto3",
    "botocore",
    "cryptography",
    "fastapi",
    "jwt",
    "numpy",
    "ollama",
    "openai",
    "opentelemetry",
    "prometheus_client",
    "psycopg",
    "pydantic",
    "pydantic_settings",
    "pypdf",
    "redis",
    "sqlalchemy",
    "starlette",
    "temporalio",
    "uvicorn",
    "turngate.api",
    "turngate.ledger",
    "turngate.settings",
    "turngate.telemetry",
    "turngate.worker",
    "turngate.workflows",
)
#: Runs `turngate ARGS...` and writes the loaded modules, as JSON, to the file in MODULES_OUT.
DRIVER = """
import json, os, sys

exit_now = os._exit

def exit_reporting(code):
    with open(os.environ["MODULES_OUT"], "w") as out:
        json.dump(sorted(sys.modules), out)
    exit_now(code)

os._exit = exit_reporting
from turngate.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:  # argparse: --help, or a usage error
    exit_reporting(exc.code if isinstance(exc.code, int) else 1)
"""
#: A bound on a command that hangs (a failure, never a speed target).
HANG_S = 60


async def turngate(tmp_path: Path, *argv: str) -> tuple[int, str, list[str]]:
    """Exit status, output and loaded modules of `turngate ARGV...` in a fresh interpreter."""
    modules_file = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(modules_file), "PYTHONPATH": str(SRC)}
    env.pop("TURNGATE_LOG_FORMAT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DRIVER, *argv, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), HANG_S)
    return proc.returncode or 0, out.decode(), json.loads(modules_file.read_text())


def heavy_among(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


async def test_help_loads_nothing_heavy(tmp_path: Path) -> None:
    code, out, modules = await turngate(tmp_path, "--help")
    assert code == 0
    assert "chat" in out and "verify" in out and "budgets" in out  # every command is listed
    assert heavy_among(modules) == []
    # only the command line itself: no command's module is imported to list it
    assert not any(m.startswith(("turngate.security", "turngate.jobs", "turngate.spend")) for m in modules)
    assert "httpx" not in modules


async def test_a_command_s_help_loads_only_that_command(tmp_path: Path) -> None:
    code, out, modules = await turngate(tmp_path, "chat", "--help")
    assert code == 0 and "--thread" in out
    assert heavy_among(modules) == []
    assert not any(m.startswith(("turngate.security", "turngate.jobs", "turngate.spend")) for m in modules)


async def test_a_chat_round_trip_loads_nothing_heavy(
    tmp_path: Path, fake_api: FakeJobsApi, fake_server: tuple[FakeJobsApi, str]
) -> None:
    url = fake_server[1]
    code, out, modules = await turngate(tmp_path, "chat", "hello", "--url", url, "--api-key", API_KEY)
    assert code == 0, out
    assert out.startswith("hi\n") and "-- ALLOW" in out  # the answer and its DECISION
    assert heavy_among(modules) == []
    assert "httpx" in modules  # the driver did reach the API


async def test_importing_the_command_line_loads_nothing_heavy(tmp_path: Path) -> None:
    modules_file = tmp_path / "modules.json"
    script = (
        f"import json, sys, turngate.cli; json.dump(sorted(sys.modules), open({str(modules_file)!r}, 'w'))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env={**os.environ, "PYTHONPATH": str(SRC)}
    )
    assert await asyncio.wait_for(proc.wait(), HANG_S) == 0
    assert heavy_among(json.loads(modules_file.read_text())) == []


def test_the_listing_matches_the_commands_own_parsers() -> None:
    """`turngate --help` lists each command from COMMANDS; built in full, each command's own
    parser says the same (name, order and help), and no command is missing from COMMANDS."""
    from turngate.cli import COMMANDS, build_parser

    def listing(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return [(choice.dest, choice.help) for choice in sub._choices_actions]

    full = listing(build_parser())
    assert full == listing(build_parser([]))
    assert [name for name, _ in full] == list(COMMANDS)
    for name in COMMANDS:  # one command built in full, the others listed: the same listing
        assert listing(build_parser([name])) == full
