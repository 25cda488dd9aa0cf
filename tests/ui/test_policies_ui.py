"""The Policies view (the policy history, a what-if whose flips link to their turns) and the mark
on turns where a shadow policy disagreed."""

from __future__ import annotations

from tests.policy_lifecycle.conftest import record_thread
from tests.stack import make_settings, running_stack
from tests.ui.test_observer_ui import assert_accessible, open_page

MAX_USER = "turngate.policies.max_user_messages"


async def test_whatif_lists_flips_with_links_to_the_turns(tmp_path, temporal_server, browser, axe_script):
    from playwright.async_api import expect

    # allow_all decides; max_user_messages shadows it and disagrees on c-5 and c-6.
    settings = make_settings(tmp_path, temporal_server.address, shadow_policy_module=MAX_USER)
    await record_thread(settings)
    async with running_stack(settings, worker=False):
        base = f"http://{settings.host}:{settings.port}"
        async with open_page(browser, viewport={"width": 1360, "height": 900}) as page:
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{base}/ui/")
            await page.get_by_label("API key").fill("")
            await page.get_by_role("button", name="Sign in").click()
            await page.get_by_role("link", name="Policies").click()
            await expect(page.get_by_role("heading", name="Policies", level=1)).to_be_visible()
            await expect(page.locator('tr[data-policy="active:turngate.allow_all:1"]')).to_contain_text("7")
            shadow_row = page.locator('tr[data-policy="shadow:turngate.max_user_messages:1"]')
            await expect(shadow_row).to_contain_text("policy.max_user_messages_exceeded \u00d72")
            await page.get_by_label("Policy module").fill(MAX_USER)
            await page.get_by_role("button", name="Run what-if").click()
            await expect(page.locator("#whatif-summary")).to_contain_text("7 turn(s) checked, 7 would change")
            flip = page.locator('tr[data-flip="c-6"]')
            await expect(flip).to_contain_text("ALLOW -> DENY")
            await expect(flip).to_contain_text("policy.max_user_messages_exceeded")
            await assert_accessible(page, axe_script, "policies")
            await flip.get_by_role("link", name="c-6").click()
            await expect(page.get_by_role("heading", name="Turn c-6")).to_be_visible()
            mark = page.locator(".shadow-disagrees")
            await expect(mark).to_contain_text("shadow disagrees")
            await expect(mark).to_contain_text("turngate.max_user_messages v1 would have decided DENY")
            await assert_accessible(page, axe_script, "turn with a disagreeing shadow")
            await page.goto(f"{base}/ui/#/turn/c-4")
            await expect(page.get_by_role("heading", name="Turn c-4")).to_be_visible()
            await expect(page.locator(".shadow-disagrees")).to_have_count(0)

            # A module off the allow-list is refused with its reason.
            await page.goto(f"{base}/ui/#/policies")
            await page.get_by_label("Policy module").fill("os")
            await page.get_by_role("button", name="Run what-if").click()
            await expect(page.locator("#whatif-result")).to_contain_text("policy.whatif_not_allowed")
            assert errors == []
