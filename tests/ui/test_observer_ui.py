"""The observer web UI in a real browser against a real turngate (Temporal dev server, worker, API).

One walk through every view in dev mode (no key): a thread appears live, its timeline shows a
DENY and an ALLOW, a turn's context shows a budget exclusion, verify passes per check, the jobs
view is an honest empty state; axe-core finds no serious or critical violation on any view.
Then API keys: a refused key, a tenant's reader sees only its tenant, every request carries the
key. Then a 1,000-turn thread: one page of its newest turns, every turn of it shown (how fast is
measured by bench/ui_thread_page.py, never here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.stack import make_settings, running_stack
from tests.ui.conftest import DOCS_IMG

BLOCKING = {"serious", "critical"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trickster"
INPUTS = json.loads((EXAMPLE / "intent-inputs.json").read_text())


async def assert_accessible(page: Any, axe_script: str, view: str) -> None:
    """axe-core (WCAG 2 A/AA rules) on the current page: no serious or critical violation."""
    await page.evaluate(axe_script)
    result = await page.evaluate(
        "axe.run(document, {resultTypes: ['violations'],"
        " runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}})"
    )
    bad = [v for v in result["violations"] if v.get("impact") in BLOCKING]
    details = "; ".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}" for v in bad
    )
    assert not bad, f"axe on the {view} view: {details}"


async def shot(
    page: Any, artifacts: Path, name: str, *, docs: str | None = None, locator: Any = None, full: bool = True
) -> None:
    path = artifacts / f"{name}.png"
    if locator is not None:
        await locator.screenshot(path=str(path))
    else:
        await page.screenshot(path=str(path), full_page=full)
    # The README's screenshots: written when missing, refreshed with TURNGATE_UPDATE_DOC_SCREENSHOTS=1
    # (so that a test run does not rewrite tracked images every time).
    if docs and (not (DOCS_IMG / docs).exists() or os.environ.get("TURNGATE_UPDATE_DOC_SCREENSHOTS") == "1"):
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMG / docs)


@contextlib.asynccontextmanager
async def open_page(browser: Any, **options: Any) -> AsyncIterator[Any]:
    """A page in a fresh context, closed even when the test fails (an open /tail would keep the
    API server from shutting down)."""
    context = await browser.new_context(**options)
    try:
        yield await context.new_page()
    finally:
        await context.close()


def refs_to(*turns: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for turn in turns:
        out += [{"ref_id": turn}, {"ref_type": "execution", "ref_id": turn}]
    return out


async def _click_until_shown(button, shown, attempts: int = 3) -> None:
    """Click ``button`` until ``shown`` appears. The hash route renders its page asynchronously,
    so a click can land on a button the render then replaces (the click is lost, nothing
    answers); a later click reaches the page as rendered."""
    from playwright.async_api import expect

    for attempt in range(attempts):
        await button.click()
        try:
            await expect(shown).to_be_visible(timeout=15_000)
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise


async def test_observer_ui_walkthrough(tmp_path, temporal_server, browser, artifacts_dir, axe_script):
    from playwright.async_api import expect

    # The Trickster example's prompt pack (layers, pinned snapshot) and a budget that holds the
    # system prompt and one short exchange, not turn 1's long one: turn 3 trims it (budget_limit).
    pack = tmp_path / "prompts"
    shutil.copytree(EXAMPLE / "prompts", pack)
    settings = make_settings(tmp_path, temporal_server.address, token_budget=2500, prompts_dir=pack)
    async with running_stack(settings) as stack:
        base = f"http://{settings.host}:{settings.port}"
        async with open_page(browser, viewport={"width": 1360, "height": 900}) as page:
            page_errors: list[str] = []
            page.on("pageerror", lambda exc: page_errors.append(str(exc)))

            # Sign in with an empty key (dev mode: unauthenticated loopback).
            await page.goto(f"{base}/ui/")
            await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
            await assert_accessible(page, axe_script, "sign-in")
            await page.get_by_label("API key").fill("")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("heading", name="Threads")).to_be_visible()
            await expect(page.locator("#live")).to_contain_text("connected")

            # Turns recorded now appear without a reload (live /tail).
            first = (
                await stack.chat(
                    "first question " * 400,
                    correlation_id="c-1",
                    thread_id="t-audit",
                    actor="alice",
                    inputs=INPUTS,
                )
            ).json()
            assert first["decision"]["payload"]["decision"] == "ALLOW"
            row = page.locator('tr[data-thread="t-audit"]')
            await expect(row).to_be_visible(timeout=10_000)
            await stack.chat(
                "second question", correlation_id="c-2", thread_id="t-audit", parent_turn_id="c-1",
                declared_refs=refs_to("c-1"), actor="alice", inputs=INPUTS,
            )  # fmt: skip
            await stack.chat(
                "third question", correlation_id="c-3", thread_id="t-audit", parent_turn_id="c-2",
                declared_refs=refs_to("c-1", "c-2"), actor="alice", inputs=INPUTS,
            )  # fmt: skip
            denied = (
                await stack.chat(
                    "use a model that does not exist", correlation_id="c-4", thread_id="t-audit",
                    requested_model_id="no-such-model", actor="bob",
                )
            ).json()  # fmt: skip
            assert denied["decision"]["payload"]["decision"] == "DENY"
            await stack.chat(
                "keep the prompt", correlation_id="c-5", thread_id="t-audit", actor="alice",
                inputs={"debug_snapshot": True},
            )  # fmt: skip
            await stack.chat("another thread", correlation_id="c-other", thread_id="t-other", actor="carol")
            await expect(row).to_contain_text("DENY 1", timeout=10_000)
            await expect(row).to_contain_text("ALLOW 4")
            await expect(page.locator('tr[data-thread="t-other"]')).to_be_visible()
            await assert_accessible(page, axe_script, "threads")
            await shot(page, artifacts_dir, "01-threads", docs="ui-threads.png")

            # Search: by decision and by actor (server-side filters).
            await page.get_by_label("Decision").select_option("DENY")
            await page.get_by_role("button", name="Search").click()
            await expect(page.locator('tr[data-thread="t-other"]')).to_have_count(0)
            await expect(page.locator('tr[data-thread="t-audit"]')).to_be_visible()
            await page.get_by_role("button", name="Clear").click()
            await page.get_by_label("Actor").fill("carol")
            await page.get_by_label("Actor").press("Enter")
            await expect(page.locator('tr[data-thread="t-audit"]')).to_have_count(0)
            await expect(page.locator('tr[data-thread="t-other"]')).to_be_visible()
            await page.get_by_role("button", name="Clear").click()

            # Timeline: INTENT -> DECISION -> EXECUTION per turn; the DENY stands out with its reason.
            await page.get_by_role("link", name="t-audit").click()
            await expect(page.get_by_role("heading", name="Thread t-audit")).to_be_visible()
            turns = page.locator("ol.turns > li")
            await expect(turns).to_have_count(5)
            deny_turn = page.locator('li.turn[data-correlation="c-4"]')
            await expect(deny_turn).to_have_class("turn denied")
            await expect(deny_turn).to_contain_text("DENY")
            await expect(deny_turn).to_contain_text("model.unavailable")
            await expect(deny_turn).to_contain_text("not executed: the turn was denied")
            allowed = page.locator('li.turn[data-correlation="c-3"]')
            await expect(allowed).to_contain_text("echo: third question")
            await expect(allowed).to_contain_text("echo / echo-1")
            await expect(allowed).to_contain_text("tokens")
            workflow = allowed.get_by_role("link", name="Workflow in the Temporal UI")
            href = await workflow.get_attribute("href")
            assert href and href.startswith("http://127.0.0.1:8233/namespaces/default/workflows/")
            await assert_accessible(page, axe_script, "timeline")
            await shot(page, artifacts_dir, "02-timeline", docs="ui-timeline.png")

            # A sixth turn shows up in the open timeline by itself.
            await stack.chat("live one", correlation_id="c-6", thread_id="t-audit", actor="alice")
            await expect(turns).to_have_count(6, timeout=10_000)

            # Context of turn 3: resolved refs with admitted_for, the budget exclusion.
            await allowed.get_by_role("link", name="Context and proof").click()
            await expect(page.get_by_role("heading", name="Turn c-3")).to_be_visible()
            context_panel = page.locator("#context")
            await expect(context_panel.locator("table.exclusions").first).to_contain_text(
                "budget_limit", timeout=10_000
            )
            await expect(context_panel.locator(".budget-trim").first).to_contain_text("Budget trimming")
            await expect(context_panel).to_contain_text("governance")
            await expect(context_panel).to_contain_text("execution_only")
            await expect(context_panel).to_contain_text("declared_ref")
            layers = context_panel.get_by_role("table", name="Layers in the system prompt")
            await expect(layers).to_contain_text("persona")
            await expect(context_panel).to_contain_text("the DECISION at index 1")  # pinned by turn 1
            await expect(page.locator("#proof")).to_contain_text("sha256:")
            await assert_accessible(page, axe_script, "turn")
            await shot(page, artifacts_dir, "03-turn-c-3")
            await shot(page, artifacts_dir, "04-context", docs="ui-context.png", locator=context_panel)

            # A DENY's turn page: the reason, and nothing executed.
            await page.goto(f"{base}/ui/#/turn/c-4")
            await expect(page.locator("#turn-verdict")).to_contain_text("DENIED")
            await expect(page.locator("#turn-verdict")).to_contain_text("model.unavailable")
            await expect(page.locator("#events")).to_contain_text("Not executed: the turn was denied.")

            # Fault/debug snapshots are linked from the turn and open in place.
            await page.goto(f"{base}/ui/#/turn/c-5")
            await page.get_by_role("button", name="prompt snapshot", exact=True).click()
            await expect(page.locator(".artifact-view pre")).to_contain_text("keep the prompt")

            # Proof: verify this thread, pass/fail per check.
            await page.goto(f"{base}/ui/#/thread/t-audit/proof")
            await _click_until_shown(
                page.get_by_role("button", name="Verify this thread"), page.locator("#verify-verdict")
            )
            await expect(page.locator("#verify-verdict")).to_contain_text("Verified")
            checks = page.locator("ul.checks > li")
            await expect(checks).to_have_count(5)
            await expect(checks.filter(has_text="PASS")).to_have_count(5)
            await assert_accessible(page, axe_script, "proof")
            await shot(page, artifacts_dir, "05-proof", docs="ui-proof.png")

            # Jobs: an honest empty state and the turn runtime.
            await page.get_by_role("link", name="Jobs").click()
            await expect(page.locator("#jobs-empty")).to_contain_text("No jobs")
            await expect(page.get_by_text("running turns")).to_be_visible()
            await assert_accessible(page, axe_script, "jobs")
            await shot(page, artifacts_dir, "06-jobs")

            # With a /jobs endpoint (job workflows are being added elsewhere), the same view lists
            # jobs with progress: rendered here from a stubbed answer in JobStatus's shape.
            fake_jobs = [
                {"id": "job-ingest-1", "type": "case.ingest", "case_id": "case-7", "state": "running",
                 "progress": 40.0, "items_done": 4, "items_total": 10,
                 "submitted_at": "2026-11-24T06:00:00Z"},
                {"id": "job-embed-1", "type": "case.embed", "case_id": "case-7", "state": "failed",
                 "progress": 0.0, "items_done": 0, "items_total": 3,
                 "error": {"type": "job.timed_out", "message": "wall clock exceeded"}},
            ]  # fmt: skip
            await page.route(f"{base}/jobs", lambda route: route.fulfill(json={"jobs": fake_jobs}))
            await page.get_by_role("link", name="Threads", exact=True).click()
            await page.get_by_role("link", name="Jobs", exact=True).click()
            job_row = page.locator('tr[data-job="job-ingest-1"]')
            await expect(job_row).to_contain_text("40% (4/10)")
            await expect(page.locator('tr[data-job="job-embed-1"]')).to_contain_text("job.timed_out")
            await assert_accessible(page, axe_script, "jobs (with jobs)")
            await shot(page, artifacts_dir, "06b-jobs-listed")
            await page.unroute(f"{base}/jobs")

            # Keyboard: the skip link shows when focused and moves focus to the content.
            await page.locator("#skip-link").focus()
            await expect(page.locator("#skip-link")).to_be_in_viewport()
            await page.keyboard.press("Enter")
            assert await page.evaluate("document.activeElement.id") == "main"

            await page.get_by_role("button", name="Sign out").click()
            await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
            assert await page.evaluate("sessionStorage.getItem('turngate.apiKey')") is None
            assert page_errors == []


async def test_ui_with_api_keys_and_tenants(tmp_path, temporal_server, browser, artifacts_dir):
    from playwright.async_api import expect

    keys_mod = pytest.importorskip("turngate.security.keys", reason="API keys are not here")
    from turngate.ledger import LedgerStore

    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    store = LedgerStore(settings.effective_ledger_url)
    try:
        keys = keys_mod.KeyStore(store.engine)
        acme_reader = keys.create("acme", "snapshot.read").secret
        acme_writer = keys.create("acme", "intent.write").secret
        globex_writer = keys.create("globex", "intent.write").secret
    finally:
        store.close()

    def bearer(secret: str) -> dict[str, str]:
        return {"authorization": f"Bearer {secret}"}

    async with running_stack(settings) as stack:
        base = f"http://{settings.host}:{settings.port}"
        post = stack.http.post
        for cid, thread, key in [("a-1", "t-acme", acme_writer), ("g-1", "t-globex", globex_writer)]:
            body = {
                "interface_version": 3,
                "correlation_id": cid,
                "payload": {"intent_type": "chat.message", "thread_id": thread, "payload": {"message": "hi"}},
            }
            answer = await post(
                "/ingress/intent", params={"wait": "execution"}, json=body, headers=bearer(key)
            )
            assert answer.status_code in (200, 202), answer.text

        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/ui/api/threads")).status_code == 401
            assert (await http.get("/ui/api/threads", headers=bearer(acme_writer))).status_code == 403
            listed = (await http.get("/ui/api/threads", headers=bearer(acme_reader))).json()
            assert [t["thread_id"] for t in listed["threads"]] == ["t-acme"]
            other = await http.get(
                "/ui/api/turn", params={"correlation_id": "g-1"}, headers=bearer(acme_reader)
            )
            assert other.status_code == 404
            turns = await http.get(
                "/ui/api/turns", params={"thread_id": "t-globex"}, headers=bearer(acme_reader)
            )
            assert turns.json()["turns"] == [] and turns.json()["total_turns"] == 0
            own = (
                await http.get("/ui/api/turn", params={"correlation_id": "a-1"}, headers=bearer(acme_reader))
            ).json()
            manifest = next(e for e in own["events"] if e["kind"] == "DECISION")["payload"]["manifest"]
            theirs = await http.get(
                "/ui/api/artifact",
                params={"correlation_id": "g-1", "artifact_id": manifest["artifact_id"]},
                headers=bearer(acme_reader),
            )
            assert theirs.status_code == 404
            for bad in ({"offset": 10**20}, {"since": "yesterday"}, {"q": "a\x00b"}, {"decision": "MAYBE"}):
                refused = await http.get("/ui/api/threads", params=bad, headers=bearer(acme_reader))
                assert refused.status_code == 422, (bad, refused.text)
            window = {"since": "2000-01-01T00:00:00Z", "until": "2000-01-02T00:00:00Z"}
            empty = await http.get("/ui/api/threads", params=window, headers=bearer(acme_reader))
            assert empty.json()["total"] == 0
            # The static page is public (it holds no data): the sign-in form must load.
            assert (await http.get("/ui/")).status_code == 200
            assert (await http.get("/ui")).headers["location"] == "/ui/"

        async with open_page(browser, viewport={"width": 1280, "height": 800}) as page:
            sent: list[tuple[str, str | None]] = []
            page.on(
                "request",
                lambda request: (
                    sent.append((request.url, request.headers.get("authorization")))
                    if "/ui/api/" in request.url or "/tail" in request.url
                    else None
                ),
            )
            await page.goto(f"{base}/ui/")
            await page.get_by_label("API key").fill("tgk_wrong_key")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("alert")).to_contain_text("refused")
            await page.get_by_label("API key").fill(acme_reader)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator('tr[data-thread="t-acme"]')).to_be_visible()
            await expect(page.locator('tr[data-thread="t-globex"]')).to_have_count(0)
            await expect(page.locator("#live")).to_contain_text("connected")
            body = {
                "interface_version": 3,
                "correlation_id": "a-2",
                "payload": {
                    "intent_type": "chat.message",
                    "thread_id": "t-acme-2",
                    "payload": {"message": "new"},
                },
            }
            await post(
                "/ingress/intent", params={"wait": "execution"}, json=body, headers=bearer(acme_writer)
            )
            await expect(page.locator('tr[data-thread="t-acme-2"]')).to_be_visible(timeout=10_000)
            await shot(page, artifacts_dir, "07-keys-threads")
            after_login = [(url, auth) for url, auth in sent if "tgk_wrong_key" not in (auth or "")]
            assert after_login and all(auth == f"Bearer {acme_reader}" for _, auth in after_login), (
                after_login
            )
            assert any("/tail" in url for url, _ in after_login)


async def test_thousand_turn_thread_renders_a_page_of_its_newest_turns(
    tmp_path, temporal_server, browser, artifacts_dir
):
    from bench.ui_thread_page import BIG_THREAD, thousand_turn_drafts
    from playwright.async_api import expect

    from turngate.ledger import LedgerStore

    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    drafts = thousand_turn_drafts()
    try:
        store.append_many(drafts)
    finally:
        store.close()

    async with running_stack(settings, worker=False) as stack:
        base = f"http://{settings.host}:{settings.port}"
        page_api = await stack.http.get(
            "/ui/api/turns", params={"thread_id": BIG_THREAD, "offset": 950, "limit": 50}
        )
        assert page_api.status_code == 200 and page_api.json()["total_turns"] == 1000

        async with open_page(browser, viewport={"width": 1360, "height": 900}) as page:
            await page.goto(f"{base}/ui/")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator('tr[data-thread="t-big"]')).to_contain_text("1000")
            await page.get_by_role("link", name="t-big").click()
            turns = page.locator("ol.turns > li")
            await expect(turns).to_have_count(50)
            await expect(page.locator("ol.turns > li").last).to_contain_text("big-0999")
            await expect(page.locator(".pager .range").first).to_contain_text("Turns 951\u20131000 of 1000")
            await expect(page.locator('li.turn[data-correlation="big-0965"]')).to_have_class("turn error")
            await expect(page.locator('li.turn[data-correlation="big-0965"]')).to_contain_text("llm.timeout")
            await shot(page, artifacts_dir, "08-thousand-turns", full=False)
            await page.get_by_role("link", name="First").first.click()
            await expect(page.locator("ol.turns > li").first).to_contain_text("big-0000")
            dom_nodes = await page.evaluate("document.getElementsByTagName('*').length")
            assert dom_nodes < 5000, f"{dom_nodes} DOM nodes for one page of turns"

            # These DECISIONs were written by hand, not decided: verify says so, check by check.
            await page.get_by_role("link", name="Proof", exact=True).click()
            await page.get_by_role("button", name="Verify this thread").click()
            await expect(page.locator("#verify-verdict")).to_contain_text("FAILED", timeout=30_000)
            checks = page.locator("ul.checks > li")
            await expect(checks.filter(has_text="Event digests")).to_contain_text("PASS")
            await expect(checks.filter(has_text="Hash chain")).to_contain_text("PASS")
            await expect(checks.filter(has_text="DECISIONs recomputed")).to_contain_text("FAIL")
            await shot(page, artifacts_dir, "09-verify-failed", full=False)
