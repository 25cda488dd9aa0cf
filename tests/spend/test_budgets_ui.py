"""The web UI's Jobs view lists the budgets /status reports, with spend and what is left, for a
tenant's key its own tenant's only (a real browser on a real stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.stack import envelope, make_settings, running_stack
from tests.ui.test_observer_ui import assert_accessible, open_page
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore
from turngate.security.keys import KeyStore


async def test_the_jobs_view_shows_the_tenants_budgets_with_spend(
    tmp_path: Path, temporal_server: Any, browser: Any, axe_script: str
) -> None:
    from playwright.async_api import expect

    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with LedgerStore(settings.effective_ledger_url) as ledger:
        secret = KeyStore(ledger.engine).create("acme", "intent.write,snapshot.read").secret
        mine = BudgetStore(ledger).set("acme", period="day", max_tokens=5000)
        BudgetStore(ledger).set("globex", period="day", max_tokens=7)
    async with running_stack(settings) as stack:
        body = envelope("hello there", correlation_id="c-ui", thread_id="t-ui")
        answer = await stack.http.post(
            "/ingress/intent",
            params={"wait": "execution"},
            json=body,
            headers={"Authorization": f"Bearer {secret}"},
        )
        usage = answer.json()["execution"]["payload"]["usage"]
        spent = usage["input_tokens"] + usage["output_tokens"]
        base = f"http://{settings.host}:{settings.port}"
        async with open_page(browser, viewport={"width": 1280, "height": 800}) as page:
            await page.goto(f"{base}/ui/")
            await page.get_by_label("API key").fill(secret)
            await page.get_by_role("button", name="Sign in").click()
            await page.get_by_role("link", name="Jobs", exact=True).click()
            row = page.locator(f'tr[data-budget="{mine.budget_id}"]')
            await expect(row).to_contain_text(f"{spent} of 5000")
            await expect(row).to_contain_text(f"{5000 - spent} tokens")
            await expect(page.locator("tr[data-budget]")).to_have_count(1)  # not globex's
            await assert_accessible(page, axe_script, "jobs with budgets")
