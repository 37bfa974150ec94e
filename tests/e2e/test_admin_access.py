"""The admin in Chromium, as an operator with a screen reader or a phone meets it: axe-core
finds no serious violation on its index, its lists (with their search) and two records,
whose previews load under the content policy.

Django's own user page is left out: its widgets have findings of their own (unlabelled
date and time fields, inline styles the content policy refuses) that this project does
not patch.
"""

import contextlib
import re
from collections.abc import Iterator

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, expect

from studio.admin.repairs import NOT_RECEIVED
from tests.e2e.studio import Studio, audit, fits_the_screen, sign_in

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


def test_the_task_lists_filter_links_are_targets_a_finger_can_hit(person: Page):
    """Found by a browser review (WCAG 2.2 target-size, serious): the filter links of the
    task list were 15 and 26 targets under 24 px, at the desktop and the phone size."""
    person.goto("/admin/studio/task/")
    options = {"runOnly": ["target-size"], "resultTypes": ["violations"]}

    found = Axe().run(person, options=options).response["violations"]

    nodes = [n["target"] for v in found for n in v["nodes"]]
    assert not nodes, f"{len(nodes)} targets under 24 px: {nodes[:5]}"


@contextlib.contextmanager
def unwatched(browser: Browser, studio: Studio, like: Page) -> Iterator[Page]:
    """A signed-in page of `like`'s size in a context of its own, where no refusal of the
    content policy is counted: axe-core itself sets inline styles on a change form."""
    context = browser.new_context(base_url=studio.url, viewport=like.viewport_size)
    try:
        page = context.new_page()
        sign_in(page)
        yield page
    finally:
        context.close()


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
    with unwatched(browser, studio, person) as page:
        for url in records:
            page.goto(url)
            audit(page)


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
    with unwatched(browser, studio, person) as page:
        page.goto(f"/admin/studio/avatarset/{set_id}/change/")
        audit(page)


# A task sent once whose answer was lost: `uncertain`, one attempt, its repairs offered.
UNCERTAIN = """
from django.utils import timezone
from studio.models import Attempt, Subject, TaskState
from studio.store import move
from tests.factories import a_task
task = a_task(Subject.objects.get(name="Bo"))
queued = a_task(Subject.objects.get(name="Bo"))  # the filtered list shows one of its total
Attempt.objects.create(task=task, number=1, submitted_at=timezone.now(), outcome="unknown")
move(task, TaskState.UNCERTAIN, phase="Ember's answer was lost", submitted_at=timezone.now())
result = f"{task.pk} {queued.pk}"
"""


def test_an_uncertain_tasks_page_and_its_resubmit_fit_a_phone_and_pass_the_audit(
    person: Page, browser: Browser, studio: Studio, no_worker: None
):
    """Found by a review at 390 px: the resubmit page scrolled sideways with the box that
    allows it at the edge and its label past it; the task's attempts were a scrolling
    region no keyboard could reach; a filtered list's "total" link was told by colour."""
    task_id, _ = studio.stack.django(UNCERTAIN).split()
    person.goto("/admin/studio/task/?state=reconcilable")
    expect(person.get_by_role("link", name=re.compile(r"total"))).to_be_visible()
    audit(person)
    with unwatched(browser, studio, person) as page:
        page.goto(f"/admin/studio/task/{task_id}/change/")
        audit(page)
        fits_the_screen(page)
        page.get_by_role("button", name=re.compile("may pay twice")).click()
        tick = page.get_by_label(NOT_RECEIVED)
        expect(tick).to_be_visible()
        fits_the_screen(page)
        audit(page)
        box = tick.bounding_box()
        assert box is not None and box["x"] + box["width"] <= page.viewport_size["width"]
        if page.viewport_size["width"] < PHONE_WIDTH:
            answers = [
                page.get_by_role("button", name=re.compile("^Yes, resubmit")),
                page.get_by_role("link", name="No, take me back"),
                page.locator("label", has=tick),
            ]
            boxes = [answer.bounding_box() for answer in answers]
            small = [b for b in boxes if b is None or b["height"] < TAP]
            assert not small, f"shorter than {TAP} px on a phone: {boxes}"
            yes, no = boxes[0], boxes[1]
            assert yes and no and yes["y"] + yes["height"] <= no["y"], f"overlapping: {yes} {no}"


TAP = 44  # CSS px: a target a finger hits at the first try (WCAG 2.5.5)
PHONE_WIDTH = 768  # the admin's own narrow layout starts below this


def test_a_tasks_repairs_take_a_finger_and_a_task_never_sent_passes_the_audit(
    person: Page, browser: Browser, studio: Studio, no_worker: None
):
    """Found by a review at 390 px: a task's repair buttons were 35 px tall, and a task
    with no attempt showed an empty attempts table, a scrolling region no keyboard
    reaches (axe's scrollable-region-focusable)."""
    task_id, queued_id = studio.stack.django(UNCERTAIN).split()
    with unwatched(browser, studio, person) as page:
        page.goto(f"/admin/studio/task/{queued_id}/change/")
        expect(page.get_by_role("button", name=re.compile("^Cancel"))).to_be_visible()
        expect(page.locator("#attempts-group")).to_have_count(0)
        audit(page)
        page.goto(f"/admin/studio/task/{task_id}/change/")
        expect(page.locator("#attempts-group")).to_have_count(1)
        buttons = page.locator(".repairs input[type=submit]").all()
        heights = [button.bounding_box()["height"] for button in buttons]  # type: ignore[index]
        assert len(heights) >= 2, heights  # reconcile and resubmit at least
        if page.viewport_size["width"] < PHONE_WIDTH:
            assert min(heights) >= TAP, f"repair buttons {heights} px tall on a phone"


# Rows as wide as a review's: a lost submit's long phase, an asset with Ember's long ids.
WIDE_ROWS = (
    UNCERTAIN.replace("result = ", "dummy = ")
    + """
from studio.phrases import NO_ROW_LATE_PHASE
from tests.factories import generated_asset
move(task, TaskState.UNCERTAIN, phase=NO_ROW_LATE_PHASE)
generated_asset(task=task, ember_image_id="img_" + "7" * 60, history_id="hist_" + "8" * 60)
result = "ok"
"""
)


def test_the_columns_a_repair_turns_on_are_in_view_on_a_desktop(
    page: Page, studio: Studio, no_worker: None
):
    """Found by a review at 1,280 px: the asset list's "Ember history" and protection, and
    the task list's attempts and age, were past the right edge of a list that scrolls."""
    studio.stack.django(WIDE_ROWS)
    sign_in(page)
    width = page.viewport_size["width"]
    for path, headers in (
        ("/admin/studio/asset/", ("Ember history", "protection released")),
        ("/admin/studio/task/", ("attempts", "age")),
    ):
        page.goto(path)
        cells = page.locator("#result_list thead th").all()
        named = {cell.inner_text().strip().lower(): cell.bounding_box() for cell in cells}
        for header in headers:
            box = named[header.lower()]
            assert box is not None and box["x"] + box["width"] <= width, (path, header, named)


# A draft set of one photo, and its name: a new one for each size the test runs at.
DRAFT_SET = """
from studio import engine
from studio.models import Asset
photo = Asset.objects.filter(origin="uploaded").first()
result = engine.create_set(name="{name}", asset_ids=[photo.pk]).pk
"""


def test_publish_asks_first_and_its_answers_fit_a_phone(person: Page, browser: Browser, studio):
    """Found by a review: the list's Publish published at one press, where the studio asks."""
    # With a long name without a space: the page was 1,956 px wide at 1,280 (a review).
    name = f"W{person.viewport_size['width']}" + "Longname" * 14
    set_id = int(studio.stack.django(DRAFT_SET.format(name=name)))
    with unwatched(browser, studio, person) as page:
        page.goto(f"/admin/studio/avatarset/?q={name.replace(' ', '+')}")
        fits_the_screen(page)
        page.get_by_role("checkbox", name=re.compile("Select this object")).first.check()
        page.get_by_role("combobox", name="Action").select_option("publish_sets")
        page.get_by_role("button", name="Go").click()

        expect(page.get_by_text("Publishing cannot be undone.")).to_be_visible()
        fits_the_screen(page)
        audit(page)
        yes = page.get_by_role("button", name="Yes, publish for good")
        if page.viewport_size["width"] < PHONE_WIDTH:
            boxes = [
                yes.bounding_box(),
                page.get_by_role("link", name="No, take me back").bounding_box(),
            ]
            small = [b for b in boxes if b is None or b["height"] < TAP]
            assert not small, f"shorter than {TAP} px on a phone: {boxes}"
        yes.click()

        expect(page.get_by_text(f"{name}: published.")).to_be_visible()
    published = studio.stack.django(
        f"from studio.models import AvatarSet\n"
        f"result = AvatarSet.objects.get(pk={set_id}).published_at is not None"
    )
    assert published
