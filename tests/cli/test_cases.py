"""`turngate cases show | build` against the fake case-job API."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli.conftest import Run
from tests.cli.fake_api import FakeJobsApi


@pytest.fixture
def docs(tmp_path: Path) -> list[str]:
    (tmp_path / "a.md").write_text("# Notes\n\nThe contract was signed on 3 May.\n")
    (tmp_path / "b.txt").write_text("Witness statement.\n")
    (tmp_path / "c.blob").write_bytes(b"\x00\x01raw")
    return [str(tmp_path / name) for name in ("a.md", "b.txt", "c.blob")]


def _calls(fake: FakeJobsApi) -> list[str]:
    """The requests that change something, in order (polls collapsed into one 'poll')."""
    calls: list[str] = []
    for method, path, detail in fake.requests:
        name = f"submit {detail}" if path == "/ingress/intent" else f"{method} {path}"
        name = "poll" if method == "GET" and path.startswith("/jobs/") else name
        if not calls or calls[-1] != name or name != "poll":
            calls.append(name)
    return calls


async def test_build_uploads_then_ingests_embeds_indexes_and_prints_the_index_version(
    run: Run, fake_api: FakeJobsApi, docs: list[str]
) -> None:
    # Options between CASE and FILEs parse too (argparse loses FILEs there when they are optional).
    result = await run("cases", "build", "acme", "--chunk-size", "500", *docs, "--interval", "0.01")

    assert result.code == 0, result.err
    assert _calls(fake_api) == [
        "POST /artifacts",
        "POST /artifacts",
        "POST /artifacts",
        "submit case.ingest",
        "poll",
        "submit case.embed",
        "poll",
        "submit case.index",
        "poll",
    ]
    assert [(u["name"], u["content_type"]) for u in fake_api.uploads] == [
        ("a.md", "text/markdown"),
        ("b.txt", "text/plain"),
        ("c.blob", "application/octet-stream"),
    ]
    ingest = fake_api.intents[0]
    assert ingest["interface_version"] == 3
    body = ingest["payload"]["payload"]
    assert body["chunking"] == {"size": 500}
    assert [(d["name"], d.get("media_type")) for d in body["documents"]] == [
        ("a.md", "text/markdown"),
        ("b.txt", "text/plain"),
        ("c.blob", None),  # unknown suffix: the API sniffs
    ]
    assert body["documents"][0]["artifact"]["size_bytes"] == len(Path(docs[0]).read_bytes())
    assert [i["payload"]["payload"] for i in fake_api.intents[1:]] == [{"case_id": "acme"}] * 2
    assert len({i["correlation_id"] for i in fake_api.intents}) == 3
    out = result.out.splitlines()
    assert out[0].startswith("uploaded a.md: ")
    assert "case.embed j-2: 100.0%  4/4 items  completed" in out
    assert out[-1] == "index_version index-v3  (pin it to query this exact index)"


async def test_build_json_summary(run: Run, fake_api: FakeJobsApi, docs: list[str]) -> None:
    result = await run(
        "cases", "build", "acme", docs[0], "--embedder", "offline", "--embedder-dim", "64",
        "--interval", "0.01", "--json",
    )  # fmt: skip

    assert result.code == 0, result.err
    summary = json.loads(result.out)
    assert summary["index_version"] == "index-v3"
    assert [(job["type"], job["state"]) for job in summary["jobs"]] == [
        ("case.ingest", "completed"),
        ("case.embed", "completed"),
        ("case.index", "completed"),
    ]
    assert fake_api.intents[1]["payload"]["payload"]["embedder"] == {"kind": "offline", "dim": 64}
    assert "case.index j-3" in result.err  # progress goes to stderr with --json


async def test_build_retries_a_full_queue_after_retry_after(
    run: Run, fake_api: FakeJobsApi, docs: list[str]
) -> None:
    fake_api.queue_full_next = 2
    fake_api.retry_after = "0.2"

    started = time.monotonic()
    result = await run("cases", "build", "acme", docs[0], "--interval", "0.01")

    assert result.code == 0, result.err
    assert time.monotonic() - started >= 0.4
    assert "case.ingest: queue full, retrying in 0.2 s (1/2)" in result.err
    assert "case.ingest: queue full, retrying in 0.2 s (2/2)" in result.err
    ingest_ids = [i["correlation_id"] for i in fake_api.intents[:3]]
    assert len(set(ingest_ids)) == 1  # one intent, submitted three times
    assert len(fake_api.uploads) == 1  # not uploaded again
    assert result.out.splitlines()[-1].startswith("index_version index-v3")


async def test_build_gives_up_on_a_queue_that_stays_full(
    run: Run, fake_api: FakeJobsApi, docs: list[str]
) -> None:
    fake_api.queue_full_next = 3

    result = await run("cases", "build", "acme", docs[0])

    assert result.code == 1
    assert "error: queue.full (HTTP 503): jobs queue full" in result.err
    assert "the job queue is full: retry later (Retry-After 0 s)" in result.err
    assert fake_api.jobs == {}


async def test_build_stops_at_a_failed_step(run: Run, fake_api: FakeJobsApi, docs: list[str]) -> None:
    fake_api.fail["case.embed"] = {"type": "provider.unavailable", "message": "embedder down"}

    result = await run("cases", "build", "acme", docs[0], "--interval", "0.01")

    assert result.code == 1
    assert "job j-2 failed: provider.unavailable: embedder down" in result.err
    assert [i["payload"]["intent_type"] for i in fake_api.intents] == ["case.ingest", "case.embed"]
    assert "index_version" not in result.out


async def test_build_no_wait_then_continue_from_embed(
    run: Run, fake_api: FakeJobsApi, docs: list[str]
) -> None:
    submitted = await run("cases", "build", "acme", docs[0], "--no-wait")

    assert submitted.code == 0, submitted.err
    assert submitted.out.splitlines()[-2:] == [
        "case.ingest: job j-1 queued",
        "next: turngate jobs watch j-1 && turngate cases rebuild acme --from embed",
    ]
    assert [i["payload"]["intent_type"] for i in fake_api.intents] == ["case.ingest"]

    assert (await run("jobs", "watch", "j-1", "--interval", "0.01")).code == 0
    rest = await run("cases", "rebuild", "acme", "--from", "embed", "--interval", "0.01")

    assert rest.code == 0, rest.err
    assert [i["payload"]["intent_type"] for i in fake_api.intents] == [
        "case.ingest",
        "case.embed",
        "case.index",
    ]
    assert rest.out.splitlines()[-1].startswith("index_version index-v3")


async def test_build_refusal_has_the_reason_code(run: Run, fake_api: FakeJobsApi) -> None:
    result = await run("cases", "rebuild", "empty")

    assert result.code == 1
    assert "error: job.input_not_found (HTTP 422): case empty has no chunks yet" in result.err


async def test_build_upload_too_large(run: Run, fake_api: FakeJobsApi, docs: list[str]) -> None:
    fake_api.max_upload_bytes = 10

    result = await run("cases", "build", "acme", docs[0])

    assert result.code == 1
    assert "error: admission.payload_too_large (HTTP 413)" in result.err
    assert fake_api.intents == []


async def test_build_rejects_a_missing_file_before_any_request(run: Run, fake_api: FakeJobsApi) -> None:
    result = await run("cases", "build", "acme", "nowhere.md")

    assert result.code == 2
    assert "error: not a file: nowhere.md" in result.err
    assert fake_api.requests == []


@pytest.mark.parametrize(
    "argv",
    [
        ("cases", "build", "acme"),
        ("cases", "rebuild", "acme", "x.md"),
        ("jobs", "watch", "j-1", "--interval", "0"),
    ],
)
async def test_usage_errors_exit_2(run: Run, argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exited:
        await run(*argv)

    assert exited.value.code == 2


async def test_rebuild_from_index_with_an_embedder(run: Run, fake_api: FakeJobsApi, docs: list[str]) -> None:
    assert (await run("cases", "build", "acme", docs[0], "--interval", "0.01")).code == 0
    fake_api.intents.clear()

    result = await run(
        "cases", "rebuild", "acme", "--embedder", "openai", "--embedder-model", "text-embedding-3-small",
        "--interval", "0.01",
    )  # fmt: skip
    again = await run("cases", "rebuild", "acme", "--from", "index", "--no-wait")

    assert result.code == 0, result.err
    assert [i["payload"] for i in fake_api.intents[:2]] == [
        {
            "intent_type": "case.embed",
            "payload": {"case_id": "acme", "embedder": {"kind": "openai", "model": "text-embedding-3-small"}},
        },
        {"intent_type": "case.index", "payload": {"case_id": "acme"}},
    ]
    assert result.out.splitlines()[-1].startswith("index_version index-v5")
    assert again.code == 0
    assert again.out.splitlines() == ["case.index: job j-6 queued"]


async def test_show_case_text_json_and_404(run: Run, fake_api: FakeJobsApi, docs: list[str]) -> None:
    assert (await run("cases", "build", "acme", docs[0], "--interval", "0.01")).code == 0

    text = await run("cases", "show", "acme")
    as_json = await run("cases", "show", "acme", "--json")
    missing = await run("cases", "show", "nope")

    assert text.code == 0
    lines = text.out.splitlines()
    assert lines[0] == "case acme"
    assert lines[2].split() == ["LATEST", "VERSION", "JOB", "CREATED"]
    assert lines[3].split()[:3] == ["chunks", "chunks-v1", "j-1"]
    assert lines[5].split()[:3] == ["index", "index-v3", "j-3"]
    assert lines[7].split()[:2] == ["RECORDS", "(3)"]
    assert lines[-1] == "pin: index_version index-v3"
    assert json.loads(as_json.out)["latest"]["index"]["version"] == "index-v3"
    assert missing.code == 1
    assert "error: case.not_found (HTTP 404): no case nope" in missing.err
