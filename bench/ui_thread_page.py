"""Opening a 1,000-turn thread in the observer web UI, against `turngate dev` (its ledger given
the thread directly: 1,000 INTENTs, their DECISIONs, an EXECUTION for each ALLOW).

Targets (medians of --runs, after one warm-up that is not counted):

- the API's page of that thread's 50 newest turns (``GET /ui/api/turns``, offset 950): <= 1.0 s;
- the browser: from clicking the thread in the thread list until its 50 newest turns are shown,
  the newest last: <= 3.0 s.

tests/ui/test_observer_ui.py checks that this page is right; how fast it is is measured here.
Chromium and Playwright as the UI tests use them: Debian's /usr/bin/chromium (or
TURNGATE_TEST_CHROMIUM), the `playwright` package's driver, no browser download.

    python bench/ui_thread_page.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/ui_thread_page.py`

from turngate.core.events import EventDraft, EventKind

BIG_THREAD = "t-big"
TURNS = 1000
PAGE = 50
API_TARGET_S = 1.0
RENDER_TARGET_S = 3.0
CHROMIUM = Path(os.environ.get("TURNGATE_TEST_CHROMIUM", "/usr/bin/chromium"))


def thousand_turn_drafts() -> list[EventDraft]:
    """Turns ``big-0000`` ... ``big-0999`` of one thread by three actors: every seventh DENIED,
    every tenth allowed one an execution error (``llm.timeout``), the others answered."""
    drafts = []
    for n in range(TURNS):
        cid = f"big-{n:04d}"
        ident = {"thread_id": BIG_THREAD, "turn_id": cid, "correlation_id": cid, "actor": f"user-{n % 3}"}
        message = f"question number {n} " * 3
        drafts.append(EventDraft(kind=EventKind.INTENT, payload={"payload": {"message": message}}, **ident))
        verdict = "DENY" if n % 7 == 3 else "ALLOW"
        reasons = ["policy.max_user_messages"] if verdict == "DENY" else ["policy.allow_all"]
        drafts.append(
            EventDraft(
                kind=EventKind.DECISION, payload={"decision": verdict, "reason_codes": reasons}, **ident
            )
        )
        if verdict == "ALLOW":
            output: dict[str, Any] = {
                "provider": "echo",
                "model_id": "echo-1",
                "output_text": f"echo: {message}",
            }
            if n % 10 == 5:
                output = {
                    "provider": "echo",
                    "model_id": "echo-1",
                    "output_text": "",
                    "error": {"code": "llm.timeout"},
                }
            else:
                output["usage"] = {"input_tokens": 12, "output_tokens": 14}
            drafts.append(EventDraft(kind=EventKind.EXECUTION, payload=output, **ident))
    return drafts


def _figures(samples: list[float], target_s: float) -> dict[str, Any]:
    median = statistics.median(samples)
    return {
        "median_s": round(median, 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "runs": len(samples),
        "target_s": target_s,
        "status": "PASS" if median <= target_s else "FAIL",
    }


async def time_api_page(url: str, headers: dict[str, str], runs: int) -> list[float]:
    import httpx

    params = {"thread_id": BIG_THREAD, "offset": TURNS - PAGE, "limit": PAGE}
    samples = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        for _ in range(runs + 1):
            started = time.perf_counter()
            response = await http.get("/ui/api/turns", params=params)
            samples.append(time.perf_counter() - started)
            response.raise_for_status()
            if response.json()["total_turns"] != TURNS:
                raise RuntimeError(f"the thread has {response.json()['total_turns']} turns, not {TURNS}")
    return samples[1:]


async def time_render(url: str, runs: int) -> list[float]:
    from playwright.async_api import async_playwright, expect

    samples = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            for _ in range(runs + 1):
                context = await browser.new_context(viewport={"width": 1360, "height": 900})
                try:
                    page = await context.new_page()
                    await page.goto(f"{url}/ui/")
                    await page.get_by_role("button", name="Sign in").click()  # dev: no key
                    await expect(page.locator(f'tr[data-thread="{BIG_THREAD}"]')).to_contain_text(str(TURNS))
                    started = time.perf_counter()
                    await page.get_by_role("link", name=BIG_THREAD).click()
                    await expect(page.locator("ol.turns > li")).to_have_count(PAGE, timeout=60_000)
                    newest = f"big-{TURNS - 1:04d}"
                    await expect(page.locator("ol.turns > li").last).to_contain_text(newest)
                    samples.append(time.perf_counter() - started)
                finally:
                    await context.close()
        finally:
            await browser.close()
    return samples[1:]


async def run(runs: int) -> dict[str, Any]:
    from bench.stack import start_turngate
    from turngate.ledger import LedgerStore

    if not CHROMIUM.exists():
        raise SystemExit(f"no Chromium at {CHROMIUM} (apt-get install chromium, or TURNGATE_TEST_CHROMIUM)")
    async with start_turngate({}) as target:
        assert target.data_dir is not None
        with LedgerStore(f"sqlite:///{target.data_dir / 'ledger.sqlite3'}") as store:
            store.append_many(thousand_turn_drafts())
        # no key, as the browser signs in: dev mode lets loopback in, every tenant's threads shown
        api = await time_api_page(target.url, {}, runs)
        render = await time_render(target.url, runs)
    return {
        "api_page": {"what": f"GET /ui/api/turns, {PAGE} of {TURNS} turns", **_figures(api, API_TARGET_S)},
        "render": {
            "what": f"click the thread -> its {PAGE} newest turns shown",
            **_figures(render, RENDER_TARGET_S),
        },
    }


def render_table(results: dict[str, Any]) -> str:
    lines = [f"{'measured':<48} {'median s (min-max)':<22} target    status"]
    for figures in results.values():
        spread = f"{figures['median_s']:.3f} ({figures['min_s']:.3f}-{figures['max_s']:.3f})"
        lines.append(f"{figures['what']:<48} {spread:<22} <= {figures['target_s']} s  {figures['status']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="counted runs of each measurement (default 5)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.runs))
    print(json.dumps(results, indent=2) if args.json else render_table(results))
    return 0 if all(figures["status"] == "PASS" for figures in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
