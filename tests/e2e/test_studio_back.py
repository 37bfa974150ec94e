"""Back, Forward and reload onto a page a form's answer drew, in Chromium.

Found by a review: after "This starts 14 paid jobs. Start them?" and Start, Back showed
Chromium's "Confirm Form Resubmission" page ("…by doing so you will repeat any action
this page previously performed"), which a family reads as paying twice; so did Back onto
the form's errors, the repeat-batch warning and a refused photo. Those pages now take
the place of the POST in the tab's history, so going back loads them afresh.
"""

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.studio import fill_batch, go, open_subject, sign_in, start_button

RESUBMIT = re.compile("Confirm Form Resubmission|ERR_CACHE_MISS", re.IGNORECASE)


def not_the_browsers_resubmit_page(page: Page) -> None:
    assert not page.url.startswith("chrome-error:"), page.url
    assert not RESUBMIT.search(page.content()), "Chromium asks to send the form again"


def test_back_after_the_second_question_is_the_form_not_a_resubmission(page: Page, no_worker: None):
    sign_in(page)
    fill_batch(page, prompt="Bo, fourteen, then Back", candidates=7)
    page.get_by_label("headshot", exact=True).check()
    start_button(page).click()
    expect(page.get_by_test_id("confirm-jobs")).to_have_text(
        "This starts 14 paid jobs. Start them?"
    )
    start_button(page).click()
    expect(page).to_have_url(re.compile(r"/batches/[0-9a-f-]+/$"))
    batches_before = page.get_by_role("link", name=re.compile("Bo, fourteen")).count()

    page.go_back()

    not_the_browsers_resubmit_page(page)
    expect(page).to_have_url(re.compile(r"/batches/new/$"))
    expect(start_button(page)).to_be_visible()
    page.go_forward()
    not_the_browsers_resubmit_page(page)
    expect(page).to_have_url(re.compile(r"/batches/[0-9a-f-]+/$"))
    go(page, "Batches")
    assert page.get_by_role("link", name=re.compile("Bo, fourteen")).count() == max(
        batches_before, 1
    ), "one batch, started once"


def test_back_onto_a_refused_photo_is_the_subject_page_not_a_resubmission(
    page: Page, tmp_path: Path
):
    sign_in(page)
    open_subject(page, "Bo")
    subject_url = page.url
    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo")
    page.get_by_label("Add a reference photo").set_input_files(notes)
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#photo-error")).to_be_visible()
    go(page, "Batches")

    page.go_back()

    not_the_browsers_resubmit_page(page)
    assert page.url == subject_url
    expect(page.get_by_role("heading", name="Bo", exact=True)).to_be_visible()
    page.go_forward()
    page.go_back()
    page.reload()
    not_the_browsers_resubmit_page(page)
    expect(page.get_by_role("heading", name="Bo", exact=True)).to_be_visible()
