"""The admin in Chromium, as an operator with a screen reader or a phone meets it: axe-core
finds no serious violation on its index, its lists (with their search) and two records,
whose previews load under the content policy.

Django's own user page is left out: its widgets have findings of their own (unlabelled
date and time fields, inline styles the content policy refuses) that this project does
not patch.
"""

import re

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


# An attempt (sent once, its answer lost) and a set holding the seeded photo: rows whose
# links a review found without a name.
ATTEMPT_AND_SET = """
from django.utils import timezone
from studio import engine
from studio.models import Asset, Attempt, Subject
from tests.factories import a_task
task = a_task(Subject.objects.get(name="Bo"))
Attempt.objects.create(task=task, number=1, submitted_at=timezone.now(), outcome="unknown")
photo = Asset.objects.filter(origin="uploaded").first()
result = engine.create_set(name="Named links", asset_ids=[photo.pk]).pk
"""


def test_an_attempts_row_and_a_sets_pictures_are_links_with_names(
    person: Page, browser: Browser, studio: Studio
):
    """Found by a review (axe's link-name, serious): the attempts list's first cell held an
    empty link, split from the task's link nested in it; a set's pictures had no alt."""
    set_id = int(studio.stack.django(ATTEMPT_AND_SET))

    person.goto("/admin/studio/attempt/")
    expect(person.get_by_role("link", name="Attempt 1").first).to_be_visible()
    audit(person)
    person.goto(f"/admin/studio/avatarset/{set_id}/change/")
    picture = person.locator("a:has(img[src*='/thumb/'])").first
    expect(picture).to_have_accessible_name(re.compile(r"\S"))
    # axe-core sets inline styles on a change form, which the policy refuses: as above.
    context = browser.new_context(base_url=studio.url, viewport=person.viewport_size)
    try:
        page = context.new_page()
        sign_in(page)
        page.goto(f"/admin/studio/avatarset/{set_id}/change/")
        audit(page)
    finally:
        context.close()
