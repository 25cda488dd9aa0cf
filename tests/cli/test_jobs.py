"""`turngate jobs list | show | watch | cancel` against the fake case-job API."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

from tests.cli.conftest import Run
from tests.cli.fake_api import FakeJobsApi
from turngate.devserver import free_port
from turngate.jobs.cli.jobs_client import FINAL_STATES, JOB_TYPES
from turngate.jobs.cli.output import ProgressDisplay


async def test_list_prints_a_table_and_passes_the_filters(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.ingest", "acme", state="completed")
    fake_api.add_job("case.embed", "acme")

    result = await run("jobs", "list", "--type", "case.embed", "--open", "--limit", "5")

    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "TYPE", "CASE", "STATE", "PROGRESS", "ITEMS", "SUBMITTED"]
    assert [row.split()[:4] for row in rows] == [["j-2", "case.embed", "acme", "queued"]]
    assert fake_api.requests[-1] == ("GET", "/jobs", {"type": "case.embed", "open": "true", "limit": "5"})


async def test_list_json_and_empty(run: Run, fake_api: FakeJobsApi) -> None:
    assert (await run("jobs", "list")).out.strip() == "no jobs"
    fake_api.add_job("case.index", "acme")

    result = await run("jobs", "list", "--json")

    assert result.code == 0
    assert [job["id"] for job in json.loads(result.out)["jobs"]] == ["j-1"]


async def test_show_text_and_json(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.ingest", "acme")

    text = await run("jobs", "show", "j-1")  # the fake advances on each read: now running
    as_json = await run("jobs", "show", "j-1", "--json")

    assert text.code == 0
    lines = dict(line.split(None, 1) for line in text.out.splitlines())
    assert lines["job"] == "j-1"
    assert lines["type"] == "case.ingest"
    assert lines["state"] == "running"
    assert lines["progress"] == "0.0%  0/4 items"
    assert as_json.code == 0
    assert json.loads(as_json.out)["items_done"] == 2


async def test_unknown_job_is_a_clear_error(run: Run, fake_api: FakeJobsApi) -> None:
    for argv in (("jobs", "show", "j-404"), ("jobs", "watch", "j-404"), ("jobs", "cancel", "j-404")):
        result = await run(*argv)

        assert result.code == 1
        assert result.out == ""
        assert "error: job.not_found (HTTP 404): no job j-404" in result.err


async def test_error_body_on_stdout_with_json(run: Run, fake_api: FakeJobsApi) -> None:
    result = await run("jobs", "show", "j-404", "--json")

    assert result.code == 1
    assert json.loads(result.out) == {
        "ok": False,
        "status": 404,
        "reason_code": "job.not_found",
        "detail": "no job j-404",
    }


async def test_connection_refused(run: Run, fake_api: FakeJobsApi) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    result = await run("jobs", "list", url=url)

    assert result.code == 2
    assert f"error: cannot reach turngate at {url}" in result.err
    assert "is `turngate dev` running?" in result.err


async def test_wrong_api_key_says_which_setting(run: Run, fake_api: FakeJobsApi) -> None:
    result = await run("jobs", "list", api_key="wrong")

    assert result.code == 1
    assert "error: auth.missing_key (HTTP 401)" in result.err
    assert "TURNGATE_API_KEY" in result.err


async def test_watch_until_completed_prints_a_line_per_change(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.ingest", "acme")

    result = await run("jobs", "watch", "j-1", "--interval", "0.01")

    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "case.ingest j-1:   0.0%  0/4 items  running",
        "case.ingest j-1:  50.0%  2/4 items  running",
        "case.ingest j-1: 100.0%  4/4 items  completed",
        'result {"case_id": "acme", "chunk_count": 4, "chunks": '
        + json.dumps(fake_api.jobs["j-1"]["result"]["chunks"], sort_keys=True)
        + "}",
    ]


async def test_watch_failed_job_exits_1_with_the_error(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.embed", "acme")
    fake_api.fail["case.embed"] = {"type": "provider.unavailable", "message": "embedder down"}

    result = await run("jobs", "watch", "j-1", "--interval", "0.01")

    assert result.code == 1
    assert result.out.splitlines()[-1] == "case.embed j-1:  50.0%  2/4 items  failed"
    assert "job j-1 failed: provider.unavailable: embedder down" in result.err


async def test_watch_json_prints_the_final_status_only_on_stdout(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.index", "acme")

    result = await run("jobs", "watch", "j-1", "--interval", "0.01", "--json")

    assert result.code == 0
    assert json.loads(result.out)["state"] == "completed"
    assert "completed" in result.err  # the progress lines


async def test_cancel_then_cancel_again(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.embed", "acme", state="running")

    first = await run("jobs", "cancel", "j-1")
    second = await run("jobs", "cancel", "j-1")
    watched = await run("jobs", "watch", "j-1", "--interval", "0.01")

    assert (first.code, first.out.strip()) == (0, "cancel requested: job j-1 (case.embed, running)")
    assert second.code == 1
    assert "error: job.finished (HTTP 409): job j-1 is already cancelled" in second.err
    assert watched.code == 1
    assert "job j-1 cancelled: job.cancelled: cancelled by request" in watched.err


async def test_cancel_json(run: Run, fake_api: FakeJobsApi) -> None:
    fake_api.add_job("case.embed", "acme")

    result = await run("jobs", "cancel", "j-1", "--json")

    assert result.code == 0
    assert json.loads(result.out)["cancel_requested"] is True


def test_tty_progress_bar_is_redrawn_in_place() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    display = ProgressDisplay(stream)
    job = {"id": "j-1", "type": "case.embed", "state": "running", "items_total": 4}
    display.update({**job, "progress": 50.0, "items_done": 2})
    display.update({**job, "progress": 50.0, "items_done": 2})  # unchanged: not redrawn
    display.update({**job, "progress": 100.0, "items_done": 4, "state": "completed"})
    display.close()

    assert stream.getvalue() == (
        "\rcase.embed j-1 [############------------]  50.0%  2/4 items  running\x1b[K"
        "\rcase.embed j-1 [########################] 100.0%  4/4 items  completed\x1b[K\n"
    )


def _module_constant(path: Path, name: str) -> ast.expr:
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return node.value
    raise AssertionError(f"{name} not found in {path}")


def test_states_and_types_mirror_the_job_models() -> None:
    # Read from the source: the CLI is a client of the API and imports nothing of the job runtime.
    models = Path(__file__).parents[2] / "src/turngate/jobs/domain/models.py"
    final_states = _module_constant(models, "FINAL_STATES")

    assert isinstance(final_states, ast.Call)
    assert ast.literal_eval(final_states.args[0]) == set(FINAL_STATES)
    assert ast.literal_eval(_module_constant(models, "JOB_TYPES")) == JOB_TYPES
