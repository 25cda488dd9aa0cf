"""`turngate chat` exits by the turn's DECISION, the same with and without --json."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Run
from tests.cli.fake_api import FakeJobsApi
from turngate.chat_command import CHAT_EXIT_HELP
from turngate.cli import build_parser


@pytest.mark.parametrize(("decision", "code"), [("ALLOW", 0), ("DENY", 3), (None, 4)])
async def test_the_exit_status_follows_the_decision(
    fake_api: FakeJobsApi, run: Run, decision: str | None, code: int
) -> None:
    fake_api.chat_decision = decision
    plain = await run("chat", "hello")
    assert plain.code == code, plain.err
    as_json = await run("chat", "hello", "--json")
    assert as_json.code == code, as_json.err
    assert (json.loads(as_json.out)["decision"] or {}).get("payload", {}).get("decision") == decision


async def test_a_refusal_and_bad_inputs(fake_api: FakeJobsApi, run: Run) -> None:
    refused = await run("chat", "hello", api_key="wrong")
    assert refused.code == 1 and "auth.missing_key" in refused.err
    refused_json = await run("chat", "hello", "--json", api_key="wrong")
    assert refused_json.code == 1 and json.loads(refused_json.out)["reason_code"] == "auth.missing_key"
    bad = await run("chat", "hello", "--inputs", "[1]")
    assert bad.code == 2 and "bad --inputs" in bad.err


def test_the_help_states_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["chat", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even inside a word
    assert "".join(CHAT_EXIT_HELP.split()) in out
