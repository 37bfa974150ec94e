"""Every studio page, at the desktop and the phone size: no serious accessibility violation,
no sideways scrolling on a phone, and a screenshot kept for a reviewer.

The pages are reached as a person reaches them, so the walk also seeds what the later pages
show: a batch with a result, a set chosen from it, and that set published.
"""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.studio import (
    audit,
    fits_the_screen,
    go,
    plan_batch,
    screenshot,
    sign_in,
    wait_until_finished,
)


def check(page: Page, name: str) -> None:
    """Audit the page as it is now, keep its screenshot, and refuse sideways scrolling."""
    page.wait_for_load_state()
    audit(page)
    screenshot(page, name)
    fits_the_screen(page)


@pytest.mark.parametrize("size", ["page", "phone"])
def test_it_passes_the_audit_on_every_studio_page(
    request: pytest.FixtureRequest, size: str, browser: object
):
    page: Page = request.getfixturevalue(size)
    page.goto("/accounts/login/")
    check(page, "login")
    sign_in(page)
    check(page, "batches")
    go(page, "New batch")
    check(page, "batch-new")

    batch_url = plan_batch(page, prompt=f"Bo for the audit at {size} size", candidates=1)
    wait_until_finished(page, 1)
    page.reload()
    expect(page.locator("[data-testid=results] > li")).to_have_count(1)
    check(page, "batch")
    page.locator("[data-testid=results] > li").first.get_by_role("link").click()
    expect(page.get_by_role("link", name="Download the original")).to_be_visible()
    check(page, "viewer")

    go(page, "Subjects")
    check(page, "subjects")
    page.get_by_role("link", name="Bo", exact=True).click()
    expect(page.get_by_role("heading", name="Bo")).to_be_visible()
    check(page, "subject")
    go(page, "Gallery")
    check(page, "gallery")
    # Each image's tick is named by its caption: "Choose Bo · …", not "Choose : Bo · …"
    # (a review's screen reader read the hidden colon, a space before it).
    expect(page.get_by_role("checkbox", name=re.compile(r"^Choose Bo"))).not_to_have_count(0)
    expect(page.get_by_role("checkbox", name=re.compile(r"^Choose ?:"))).to_have_count(0)

    page.goto(batch_url)
    page.locator("[data-testid=results] input[name=assets]").first.check()
    page.get_by_role("button", name="Choose favourites").click()
    expect(page.locator("[data-testid=chosen] > li")).to_have_count(1)
    check(page, "set")
    renamed = f"Bo's audit set at {size} size"
    page.get_by_text("Rename or delete").click()
    page.get_by_label("New name").fill(renamed)
    page.get_by_role("button", name="Rename", exact=True).click()
    expect(page.get_by_role("heading", name=renamed, exact=True)).to_be_visible()
    page.get_by_text("Rename or delete").click()
    page.get_by_role("link", name=f"Delete {renamed}…").click()
    expect(page.get_by_role("heading", name=f"Delete the set {renamed}?")).to_be_visible()
    check(page, "set-delete")
    page.get_by_role("link", name="Keep it").click()
    go(page, "Sets")
    check(page, "sets")
    page.get_by_role("link", name=renamed).click()
    page.get_by_role("link", name="Publish…").click()
    check(page, "set-publish")
    page.get_by_role("button", name="Publish for good").click()
    expect(page.get_by_test_id("api-url")).to_be_visible()
    check(page, "set-published")
