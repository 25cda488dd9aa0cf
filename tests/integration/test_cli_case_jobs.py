"""The case-job CLI against a real stack: `turngate cases build` uploads, ingests, embeds and
indexes with progress and prints the index version; `jobs list/show` read the jobs; `chat` with a
JSON `case_query` ref gets an answer whose DECISION pins that version."""

from __future__ import annotations

import json

import pytest

from tests.stack import make_settings, running_stack
from turngate.cli import build_parser


async def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    args = build_parser().parse_args([*argv, "--url", url])
    code = await args.run(args)
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_cases_build_then_chat_with_a_case_query(tmp_path, temporal_server, capsys) -> None:
    (tmp_path / "keeper.md").write_text("# Lighthouse\n\nThe keeper logs every passing ship at dusk.\n")
    (tmp_path / "bread.txt").write_text("Sourdough bread needs a living starter and patience.\n")
    settings = make_settings(tmp_path / "data", temporal_server.address)
    url = f"http://{settings.host}:{settings.port}"
    async with running_stack(settings):
        code, out, err = await run(
            capsys,
            url,
            "cases",
            "build",
            "harbour",
            str(tmp_path / "keeper.md"),
            str(tmp_path / "bread.txt"),
            "--chunk-size",
            "100",
            "--chunk-overlap",
            "0",
        )
        assert code == 0, err
        # the upload lines print artifact digests; the version is on its own line
        version_line = next(line for line in out.splitlines() if line.startswith("index_version "))
        version = version_line.split()[1]
        assert version.startswith("sha256:")
        assert "case.index" in out + err and "completed" in out + err

        code, out, _ = await run(capsys, url, "jobs", "list", "--json")
        jobs = json.loads(out)
        assert code == 0 and sorted(j["type"] for j in jobs["jobs"]) == [
            "case.embed",
            "case.index",
            "case.ingest",
        ]
        code, out, _ = await run(capsys, url, "cases", "show", "harbour", "--json")
        assert code == 0 and json.loads(out)["latest"]["index"]["version"] == version

        ref = json.dumps({"ref_type": "case_query", "case_id": "harbour", "query": "keeper ship", "top_k": 1})
        code, out, err = await run(capsys, url, "chat", "Who logs ships?", "--ref", ref)
        assert code == 0, err
        assert f"-- case_query harbour 'keeper ship': 1 chunk(s) from index {version}" in out
        code, out, err = await run(capsys, url, "chat", "Who logs ships?", "--ref", ref, "--json")
        assert code == 0, err
    decision = json.loads(out)["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    assert decision["external_context"][0]["index_version"] == version
