"""A batch's failed images asked for again from its page, in Chromium (the whole way: the
link, the form filled in, its button naming the spend, the new batch)."""

from playwright.sync_api import Page, expect

from tests.e2e.studio import SLOW, Studio, plan_batch, sign_in, start_button


def test_failed_images_are_asked_for_again_from_the_batch_page(page: Page, studio: Studio):
    """Found by a phone review: "a new batch asks for it again, paid again", and no way
    there but typing the whole form again."""
    sign_in(page)
    studio.configure_ember(fail_jobs=2)
    try:
        plan_batch(page, prompt="Bo, two of three fail", candidates=3)
        expect(page.get_by_test_id("progress-text")).to_contain_text("2 failed", timeout=SLOW)
    finally:
        studio.configure_ember(fail_jobs=0)

    page.get_by_test_id("ask-again-row").first.click()  # live, on a failed row

    expect(page.get_by_test_id("again")).to_contain_text("ask again for the 2 images")
    expect(page.get_by_label("Prompt", exact=True)).to_have_value("Bo, two of three fail")
    expect(start_button(page)).to_have_text("Start 2 paid jobs")
    start_button(page).click()
    expect(page.get_by_role("heading", name="Bo, two of three fail (again)")).to_be_visible()
    expect(page.get_by_test_id("progress-text")).to_have_text("2 ready", timeout=SLOW)

    # Found by a review: Back to the form and its button again paid for them once more.
    page.go_back()
    expect(start_button(page)).to_have_text("Start 2 paid jobs")
    start_button(page).click()
    expect(page.get_by_test_id("twin")).to_contain_text("You started the same batch")
    expect(page.get_by_test_id("twin")).to_contain_text("Nothing new was started.")
