"""The dev server's Temporal Web UI as an inspection tool (Chromium through Playwright): a turn is
found by its thread id and a job by its case id, and each shows its summary, details and
activity summaries. The screenshots are docs/TEMPORAL-UI.md's (docs/img/temporal-*.png)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.stack import make_settings, running_stack
from tests.ui.test_observer_ui import open_page, shot
from turngate.devserver import DevServer, free_port


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A dev server with its Web UI (the session's is headless)."""
    root = tmp_path_factory.mktemp("temporal-ui")
    server = DevServer(db_file=None, port=free_port(), ui_port=free_port(), log_file=root / "temporal.log")
    server.start()
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()


def _shown(page: Any, text: str, exact: bool = False) -> Any:
    """Elements showing ``text`` (hidden tabs hold copies of some of it)."""
    return page.get_by_text(text, exact=exact).locator("visible=true")


async def _rendered(page: Any, frame_id: str, text: str, timeout_ms: float = 20_000) -> None:
    """Wait for ``text`` in the metadata frame ``frame_id`` (the UI renders summaries and details as
    markdown in sandboxed frames, and replaces a frame once the workflow's data has loaded: an
    empty one first). The frame locator finds the frame anew on each check, so a replaced frame is
    no error, where a frame object taken from ``page.frames`` earlier is detached."""
    await page.frame_locator(f"iframe#{frame_id}").get_by_text(text).first.wait_for(timeout=timeout_ms)


def _list_url(server: DevServer, query: str) -> str:
    return f"{server.ui_url}/namespaces/default/workflows?query={quote(query)}"


async def _find(page: Any, url: str, text: str) -> None:
    """Open a workflow list and wait for ``text`` in it (visibility is eventually consistent:
    reload until the row is there)."""
    for _ in range(6):
        await page.goto(url)
        try:
            await _shown(page, text).first.wait_for(timeout=10_000)  # a loaded machine renders slowly
            return
        except Exception:
            await asyncio.sleep(0.5)
    await page.screenshot(path=str(Path(__file__).parent / "test-artifacts" / "temporal-not-found.png"))
    raise AssertionError(f"{text!r} never listed at {url}")


async def test_find_a_turn_by_thread_and_a_job_by_case(
    tmp_path: Path, ui_server: DevServer, browser: Any, artifacts_dir: Path
) -> None:
    settings = make_settings(tmp_path, ui_server.address, temporal_ui_url=ui_server.ui_url)
    thread = f"thread-{uuid.uuid4().hex[:6]}"
    case = f"contracts-{uuid.uuid4().hex[:4]}"
    async with running_stack(settings) as stack:
        answer = await stack.chat(
            "Which clauses mention late delivery?",
            correlation_id=f"c-{uuid.uuid4().hex[:8]}",
            thread_id=thread,
        )
        assert answer.status_code == 202, answer.text
        job = {
            "interface_version": 3,
            "correlation_id": f"j-{uuid.uuid4().hex[:8]}",
            "payload": {
                "intent_type": "case.ingest",
                "payload": {
                    "case_id": case,
                    "documents": [
                        {"name": f"c{i}.txt", "text": f"Clause {i}: delivery is due."} for i in range(3)
                    ],
                },
            },
        }
        accepted = await stack.http.post("/ingress/intent", json=job)
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        for _ in range(100):
            if (await stack.http.get(f"/jobs/{job_id}")).json()["state"] == "completed":
                break
            await asyncio.sleep(0.2)

        async with open_page(browser, viewport={"width": 1400, "height": 900}) as page:
            # a turn, by its thread id: the list shows the turn's summary
            await _find(page, _list_url(ui_server, f'TurngateThreadId="{thread}"'), f"/{thread}/")
            await shot(page, artifacts_dir, "temporal-turn-list", docs="temporal-turn-list.png", full=False)
            await _shown(page, f"/{thread}/").first.click()
            # the timeline: each activity with its summary
            await _shown(page, "append DECISION, call echo").first.wait_for(timeout=10000)
            await shot(page, artifacts_dir, "temporal-turn", docs="temporal-turn.png", full=True)
            # the turn's summary and details (links to its page in turngate's web UI)
            await _shown(page, "User Metadata", exact=True).first.click()
            await _rendered(page, "user-metadata-summary", f"thread {thread}")
            await _rendered(page, "user-metadata-details", "Turn: context and proof")
            await shot(
                page, artifacts_dir, "temporal-turn-metadata", docs="temporal-turn-metadata.png", full=False
            )

            # a job, by its case id: readable id, summary, details, step summaries
            await _find(page, _list_url(ui_server, f'TurngateCaseId="{case}"'), job_id)
            await shot(page, artifacts_dir, "temporal-job-list", docs="temporal-job-list.png", full=False)
            await page.get_by_role("link", name=job_id, exact=True).first.click()
            await _shown(page, "ingest documents: first step").first.wait_for(timeout=10000)
            await shot(page, artifacts_dir, "temporal-job", docs="temporal-job.png", full=True)
            await _shown(page, "User Metadata", exact=True).first.click()
            await _rendered(page, "user-metadata-summary", f"case.ingest · case {case}")
            await _rendered(page, "user-metadata-current-details", "documents (100.0%)")
            await shot(
                page, artifacts_dir, "temporal-job-metadata", docs="temporal-job-metadata.png", full=False
            )
