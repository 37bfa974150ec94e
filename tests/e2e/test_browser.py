"""The studio in a real browser: Debian's chromium, the web server, the worker and the simulator.

Everything runs as it would for a person: uvicorn serves the pages, `run_worker`
drives the tasks through the Ember simulator, and Playwright clicks. Waits are
bounded; the assertions are what a person sees on the page.
"""

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.studio import (
    SLOW,
    Studio,
    add_subject,
    asset_ids_on,
    go,
    loaded_thumbnails,
    plan_batch,
    portrait_png,
    screenshot,
    sign_in,
    wait_until_finished,
)

HISTORY_MISSING = "Image saved, waiting for Ember's record"
PUBLISH_WAITS = "1 chosen image still lacks Ember history; publishing waits for repair."


# --- scenarios --------------------------------------------------------------------------


def test_it_uploads_a_photo_and_watches_a_batch_finish_without_a_reload(page: Page, tmp_path: Path):
    sign_in(page)

    add_subject(page, "Ada")
    page.get_by_label("Add a reference photo").set_input_files(portrait_png(tmp_path / "ada.png"))
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_text("Added ada.png to Ada's photos.")).to_be_visible()
    expect(page.locator(".grid img")).to_have_count(1)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.grid img')].every(i => i.naturalWidth > 0)"
    )

    plan_batch(page, prompt="Ada, a friendly watercolour portrait", subject="Ada")
    progress = page.get_by_test_id("progress-text")
    expect(progress).to_be_visible()
    # Set after the page loaded: a full reload would wipe it.
    page.evaluate("window.sameDocument = true")

    wait_until_finished(page, 2)
    expect(page.get_by_test_id("task-state")).to_have_text(["Ready", "Ready"])
    expect(page.get_by_test_id("paid")).to_have_text("Paid Ember requests: 2")
    expect(progress).to_have_text("2 ready")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=task] img')]"
        ".filter(i => i.complete && i.naturalWidth > 0).length === 2",
        timeout=SLOW,
    )
    assert loaded_thumbnails(page) == 2
    assert page.evaluate("window.sameDocument") is True
    expect(page.get_by_test_id("worker")).to_have_text("Worker running")
    screenshot(page, "batch")


def test_it_cancels_a_batch_that_is_still_queued(page: Page, studio: Studio):
    sign_in(page)
    studio.stop_worker()
    try:
        plan_batch(page, prompt="Bo in a hat, nobody sends this", candidates=3)
        expect(page.get_by_test_id("task-state")).to_have_text(["Waiting to start"] * 3)

        # One press asks first, in place (a review's one tap had cancelled a whole batch).
        page.get_by_text("Cancel batch…").click()
        yes = page.get_by_role("button", name="Yes, cancel them")
        expect(yes).to_be_in_viewport()
        expect(page.get_by_text("Cancel every task of this batch not yet sent")).to_be_visible()
        expect(page.get_by_test_id("task-state")).to_have_text(["Waiting to start"] * 3)
        yes.click()

        expect(page.get_by_text("Cancelled 3 tasks.")).to_be_visible()
        expect(page.get_by_test_id("task-state")).to_have_text(["Cancelled"] * 3)
        expect(page.get_by_test_id("progress-text")).to_have_text("3 cancelled")
        expect(page.get_by_test_id("paid")).to_have_text("Paid Ember requests: 0")
        expect(page.get_by_text("Cancel batch…")).to_have_count(0)
    finally:
        studio.start_worker()


def test_it_builds_reorders_and_publishes_a_set(page: Page):
    sign_in(page)
    plan_batch(page, prompt="Bo for the family set", candidates=2)
    wait_until_finished(page, 2)
    first, second = asset_ids_on(page)

    # A set starts from ticked images (an empty one is refused): the gallery's, here.
    go(page, "Gallery")
    page.locator(f'input[name="assets"][value="{first}"]').check()
    page.get_by_label("Set name").fill("Family")
    page.get_by_role("button", name="Create set").click()
    expect(page.get_by_role("heading", name="Family")).to_be_visible()
    page.locator(f'input[name="assets"][value="{second}"]').check()
    page.get_by_role("button", name="Add chosen").click()
    chosen = page.locator("[data-testid=chosen] > li")
    expect(chosen).to_have_count(2)
    top, bottom = (chosen.nth(i).get_attribute("data-asset") for i in (0, 1))
    assert {top, bottom} == {str(first), str(second)}

    chosen.nth(0).get_by_role("button", name=re.compile(r" later$")).click()
    expect(chosen.nth(0)).to_have_attribute("data-asset", str(bottom))
    expect(chosen.nth(1)).to_have_attribute("data-asset", str(top))

    page.get_by_role("link", name="Publish…").click()
    page.get_by_role("button", name="Publish for good").click()
    expect(page.get_by_text("Published Family.")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/sets/\d+/published/$"))
    shown = page.locator("[data-testid=published] a")
    expect(shown).to_have_count(2)
    expect(shown.nth(0)).to_have_attribute("href", f"/assets/{bottom}/original/")
    expect(shown.nth(1)).to_have_attribute("href", f"/assets/{top}/original/")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=published] img')]"
        ".every(i => i.complete && i.naturalWidth > 0)"
    )
    expect(page.get_by_role("button", name=re.compile("Publish"))).to_have_count(0)


def test_it_refuses_to_publish_while_an_images_history_is_missing(page: Page, studio: Studio):
    sign_in(page)
    studio.configure_ember(fail_history_writes=True)
    try:
        plan_batch(page, prompt="Bo whose history Ember lost", candidates=1)
        expect(page.get_by_test_id("task-state")).to_have_text([HISTORY_MISSING], timeout=SLOW)
        page.wait_for_function(
            "() => document.querySelector('[data-testid=task] img')?.naturalWidth > 0"
        )
        [lost] = asset_ids_on(page)
    finally:
        studio.configure_ember(fail_history_writes=False)

    go(page, "Gallery")
    page.locator(f'input[name="assets"][value="{lost}"]').check()
    page.get_by_label("Set name").fill("Needs repair")
    page.get_by_role("button", name="Create set").click()
    expect(page.locator("[data-testid=chosen] > li")).to_have_count(1)

    # Publish is offered disabled, with the reason beside it, until the history is repaired.
    publish = page.get_by_role("button", name="Publish…")
    expect(publish).to_be_disabled()
    expect(publish).to_have_accessible_description(PUBLISH_WAITS)
    expect(page.get_by_role("heading", name="Needs repair")).to_be_visible()
    # Its publish page, opened by the URL, says the same and asks nothing (the guard's
    # refusal of a publish posted anyway is tests/test_sets_pages.py's).
    page.goto(page.url + "publish/")
    expect(page.locator("#publish-why")).to_have_text(PUBLISH_WAITS)
    expect(page.get_by_role("button", name="Publish for good")).to_have_count(0)


def test_an_operator_repairs_missing_history_from_the_admin(page: Page, studio: Studio):
    sign_in(page)
    studio.configure_ember(fail_history_writes=True)
    try:
        batch_url = plan_batch(page, prompt="Bo, repaired by an operator", candidates=1)
        expect(page.get_by_test_id("task-state")).to_have_text([HISTORY_MISSING], timeout=SLOW)
    finally:
        studio.configure_ember(fail_history_writes=False)
    assert studio.sim is not None
    studio.sim.post("/_sim/history/repair")  # Ember's own repair of its history rows
    batch_id = batch_url.rstrip("/").split("/")[-1]

    page.goto(f"/admin/studio/task/?batch__id__exact={batch_id}")
    expect(page.get_by_text("worker running", exact=False).first).to_be_visible()
    row = page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("History Missing")
    row.locator("input.action-select").check()
    page.locator("select[name=action]").select_option("reconcile_tasks")
    page.get_by_role("button", name="Go").click()

    expect(page.locator(".messagelist").first).to_contain_text("copying")
    # The worker owns the copy: it finds the original already saved and records the history.
    page.goto(batch_url)
    expect(page.get_by_test_id("task-state")).to_have_text(["Ready"], timeout=SLOW)
    page.goto(f"/admin/studio/task/?batch__id__exact={batch_id}")
    expect(page.locator("#result_list tbody tr")).to_contain_text("Done")
