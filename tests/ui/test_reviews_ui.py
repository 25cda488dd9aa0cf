"""The Reviews view: the turns waiting for a reviewer, with their message and what the policy
asked, approved and denied from the page (docs/REVIEWS.md; its screenshot is docs/img/ui-reviews.png)."""

from __future__ import annotations

import asyncio

from tests.stack import make_settings, running_stack
from tests.ui.test_observer_ui import assert_accessible, open_page, shot


async def _waiting(stack, cid: str) -> None:
    for _ in range(200):
        listed = (await stack.http.get("/reviews")).json()["reviews"]
        if any(review["correlation_id"] == cid for review in listed):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{cid} never waited for review")


async def test_a_reviewer_approves_and_denies_from_the_page(
    tmp_path, temporal_server, browser, artifacts_dir, axe_script
):
    from playwright.async_api import expect

    settings = make_settings(
        tmp_path,
        temporal_server.address,
        policy_module="tests.reviews.policies",
        policy_object="REVIEW",
        wait_timeout_s=1.0,
    )
    async with running_stack(settings) as stack:
        await stack.chat(
            "Please refund order 1042: the parcel never arrived.",
            correlation_id="c-refund-1042",
            thread_id="support-17",
            wait=None,
        )
        await stack.chat(
            "Refund the duplicate charge on invoice 88.",
            correlation_id="c-refund-88",
            thread_id="billing-3",
            wait=None,
        )
        for cid in ("c-refund-1042", "c-refund-88"):
            await _waiting(stack, cid)
        base = f"http://{settings.host}:{settings.port}"
        async with open_page(browser, viewport={"width": 1280, "height": 900}) as page:
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{base}/ui/")
            await page.get_by_label("API key").fill("")
            await page.get_by_role("button", name="Sign in").click()
            await page.get_by_role("link", name="Reviews").click()
            await expect(page.get_by_role("heading", name="Reviews", level=1)).to_be_visible()
            await expect(page.locator("#reviews-count")).to_contain_text("2 turn(s) waiting for review")
            first = page.locator('section[data-review="c-refund-1042"]')
            await expect(first).to_contain_text("the parcel never arrived")
            await expect(first).to_contain_text("policy.review_keyword")
            await assert_accessible(page, axe_script, "reviews")
            await shot(page, artifacts_dir, "reviews", docs="ui-reviews.png")

            await first.get_by_label("Comment").fill("Tracking shows no delivery; refund approved.")
            await first.get_by_role("button", name="Approve").click()
            await expect(first).to_contain_text("Approved")
            second = page.locator('section[data-review="c-refund-88"]')
            await expect(second).to_be_visible()
            await second.get_by_role("button", name="Deny").click()
            await expect(page.locator("#reviews-empty")).to_be_visible(timeout=10_000)
            assert errors == []
        events = {}
        for _ in range(100):
            page_events = (await stack.http.get("/snapshot", params={"limit": 100})).json()["events"]
            events = {(e["correlation_id"], e["kind"]): e for e in page_events}
            if ("c-refund-1042", "EXECUTION") in events and ("c-refund-88", "DECISION") in events:
                break
            await asyncio.sleep(0.1)
        approved = events[("c-refund-1042", "DECISION")]["payload"]
        assert approved["decision"] == "ALLOW" and approved["review"]["comment"]["sha256"]
        assert events[("c-refund-88", "DECISION")]["payload"]["reason_codes"] == ["review.denied"]
