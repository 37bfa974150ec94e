"""The admin in Chromium, as an operator with a screen reader or a phone meets it: axe-core
finds no serious violation on its index, its lists (with their search) and two records,
whose previews load under the content policy.

Django's own user page is left out: its widgets have findings of their own (unlabelled
date and time fields, inline styles the content policy refuses) that this project does
not patch.
"""

from playwright.sync_api import Browser, Page, expect

from tests.e2e.studio import Studio, audit, sign_in

LISTS = (
    "/admin/",
    "/admin/studio/task/",
    "/admin/studio/batch/",
    "/admin/studio/asset/",
    "/admin/studio/subject/",
    "/admin/studio/scrubreport/",
    "/admin/auth/user/",
)
# Lists whose first record has a preview: the photo the studio was seeded with.
WITH_PREVIEWS = ("/admin/studio/subject/", "/admin/studio/asset/")


def test_the_admins_lists_have_no_serious_accessibility_violation(person: Page):
    for path in LISTS:
        answer = person.goto(path)
        assert answer is not None and answer.status == 200, path
        audit(person)


def first_record(page: Page, listing: str) -> str:
    page.goto(listing)
    page.locator("#result_list tbody th a").first.click()
    page.wait_for_url("**/change/")
    return page.url


def test_a_records_preview_loads_and_its_page_has_no_serious_violation(
    person: Page, browser: Browser, studio: Studio
):
    records = []
    for listing in WITH_PREVIEWS:
        records.append(first_record(person, listing))
        # The fixture fails the test if the content policy refused the preview (a data: URI).
        preview = person.locator("img[src*='/thumb/']").first
        expect(preview).to_be_visible()
        assert preview.evaluate("img => img.complete && img.naturalWidth"), person.url
    # axe-core itself sets inline styles on these forms, which the policy refuses: the audit
    # runs in a context of its own, where no refusal is counted.
    context = browser.new_context(base_url=studio.url, viewport=person.viewport_size)
    try:
        page = context.new_page()
        sign_in(page)
        for url in records:
            page.goto(url)
            audit(page)
    finally:
        context.close()
