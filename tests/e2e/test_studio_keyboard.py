"""The keyboard in a real browser, at a desktop's and a phone's size: focus stays where the
person left it while the page updates itself or comes back from a move, Enter in a field
never starts paid jobs, and the selection bar never hides the box that has focus.
"""

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.studio import (
    DESKTOP,
    SLOW,
    Studio,
    audit,
    fill_batch,
    plan_batch,
    sign_in,
    size,
    start_button,
    wait_until_finished,
)

PICTURES = 24  # more than a screen of the gallery at either size
IN_THE_SET = 12
RESULTS = "[data-testid=results] > li"

SEED = f"""
from studio import engine
from studio.models import Subject
from tests.factories import png_bytes
bo = Subject.objects.get(name="Bo")
ids = [
    engine.add_reference(subject=bo, data=png_bytes(3000 + n), file_name=f"row-{{n:02}}.png").pk
    for n in range({PICTURES})
]
result = engine.create_set(name="Twelve in a row", asset_ids=ids[:{IN_THE_SET}]).pk
"""

# Every row of the batch moves on (its version), as when the worker writes: the next poll
# swaps those rows for new ones.
TOUCH_ROWS = """
from django.db.models import F
from studio.models import Task
result = Task.objects.filter(batch__title={title!r}).update(version=F("version") + 1)
"""

# The focused control, if it is a picture's box: whether the selection bar covers it or it
# is off the screen; None for any other control.
BOX_HIDDEN = """() => {
  const box = document.activeElement;
  if (!(box instanceof HTMLInputElement) || box.name !== "assets") return null;
  const b = box.getBoundingClientRect();
  const bar = document.querySelector("[data-selection]").getBoundingClientRect();
  const covered = b.bottom > bar.top && b.top < bar.bottom
    && b.right > bar.left && b.left < bar.right;
  return covered || b.top < 0 || b.bottom > innerHeight;
}"""


# Scroll the page until the box of the nth picture of the gallery sits at the screen's foot.
FOOT = """n => {
  const box = document.querySelectorAll("ul.grid > li input[name=assets]")[n];
  scrollBy(0, box.getBoundingClientRect().bottom - innerHeight + 4);
}"""


@pytest.fixture(scope="module")
def twelve(studio: Studio) -> int:
    """Add the module's pictures and a set of twelve of them; return the set's id."""
    return int(studio.stack.django(SEED))


@pytest.fixture(scope="module")
def finished(browser: Browser, studio: Studio) -> Iterator[str]:
    """Plan a batch of two through the page, wait for its results, and return its URL."""
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        sign_in(page)
        url = plan_batch(page, prompt="Bo in the snow, two to keep focus on", candidates=2)
        wait_until_finished(page, 2)
        yield url
    finally:
        context.close()


def replaced(page: Page) -> None:
    """Wait until the control that had focus was swapped out of the page."""
    page.wait_for_function("() => !document.body.contains(window.before)", timeout=SLOW)


# --- focus through live updates --------------------------------------------------------------


def test_focus_stays_on_a_tasks_cancel_button_when_its_row_is_updated(
    person: Page, studio: Studio, no_worker: None
):
    title = f"Bo, a row updated under the focus, {size(person)}"
    plan_batch(person, prompt=title, candidates=2)
    cancel = person.get_by_role("button", name="Cancel GPT Image image #2")
    cancel.focus()
    person.evaluate("window.before = document.activeElement")

    assert studio.stack.django(TOUCH_ROWS.format(title=title)) == 2
    replaced(person)

    expect(cancel).to_be_focused()


END_ONE = """
from django.db.models import F
from studio.models import Task
result = Task.objects.filter(batch__title={title!r}, ordinal=2).update(
    state="failed", phase="Failed", error="Ember could not", next_attempt_at=None,
    version=F("version") + 1,
)
"""


def test_focus_stays_at_the_task_when_its_cancel_goes_away(
    person: Page, studio: Studio, no_worker: None
):
    """Found by a re-review: a task's Cancel gone (the task ended) left focus on the page;
    and by two reviews since: it then went to the progress at the top, far from the row a
    phone's person was at. It goes to the task's row."""
    title = f"Bo, a task ends under the focus, {size(person)}"
    plan_batch(person, prompt=title, candidates=2)
    cancel = person.get_by_role("button", name="Cancel GPT Image image #2")
    cancel.focus()
    person.evaluate("window.before = document.activeElement")

    assert studio.stack.django(END_ONE.format(title=title)) == 1
    replaced(person)

    row = person.locator("[data-testid=task]").filter(has_text="GPT Image #2")
    expect(row).to_be_focused()
    expect(row).to_be_in_viewport()


ALL_SENT = """
from datetime import timedelta
from django.db.models import F
from django.utils import timezone
from studio.models import Task
result = Task.objects.filter(batch__title={title!r}).update(
    state="running", phase="Ember is generating", ember_job_id="job_x",
    next_attempt_at=timezone.now() + timedelta(hours=1), version=F("version") + 1,
)
"""


def test_the_cancel_question_gone_under_the_focus_says_why(
    person: Page, studio: Studio, no_worker: None
):
    """Found by a review: the question's "Yes, cancel them" had the focus when the batch's
    last tasks reached Ember; the area became "Nothing left to cancel…", and a screen reader
    heard only the progress, never why the button went."""
    title = f"Bo, sent under the question, {size(person)}"
    plan_batch(person, prompt=title, candidates=2)
    person.get_by_text("Cancel batch…").click()
    person.get_by_role("button", name="Yes, cancel them").focus()
    person.evaluate("window.before = document.activeElement")

    assert studio.stack.django(ALL_SENT.format(title=title)) == 2
    replaced(person)

    expect(person.get_by_test_id("progress-text")).to_be_focused()
    expect(person.locator("#progress-said")).to_contain_text(
        "Nothing left to cancel: the rest is with Ember, and what it makes will be kept."
    )


def test_a_tasks_cancel_comes_back_to_its_row_with_focus_on_it(
    person: Page, studio: Studio, no_worker: None
):
    """Found by a review: the page came back at its top (from 1,132 px down, on a phone),
    focus on nothing, and the person had to find the list again."""
    title = f"Bo, cancelled far down, {size(person)}"
    plan_batch(person, prompt=title, candidates=8)
    cancel = person.get_by_role("button", name="Cancel GPT Image image #8")
    cancel.scroll_into_view_if_needed()
    row_id = cancel.get_attribute("id").removesuffix("-cancel")
    scrolled = person.evaluate("scrollY")

    cancel.press("Enter")

    row = person.locator(f"#{row_id}")
    expect(row).to_have_attribute("data-state", "cancelled")
    expect(row).to_be_focused()
    expect(row).to_be_in_viewport()
    assert person.evaluate("scrollY") > 0, f"back at the top (was {scrolled} px down)"
    expect(person.get_by_role("status").first).to_contain_text("Cancelled GPT Image image #8")


def test_focus_stays_on_a_result_when_the_results_are_reloaded(person: Page, finished: str):
    person.goto(finished)
    second = person.locator(RESULTS).nth(1)

    for control in (second.get_by_role("link"), second.get_by_role("checkbox")):
        control.focus()
        person.evaluate("window.before = document.activeElement")
        # What a poll that saw a new image does: the results section reloads in place.
        with person.expect_response(re.compile(r"/results/$")):
            person.evaluate("htmx.trigger(document.body, 'results-changed')")
        replaced(person)

        expect(control).to_be_focused()


# --- Enter does not pay ------------------------------------------------------------------------


def test_enter_in_a_field_of_the_new_batch_form_starts_nothing(person: Page):
    fill_batch(person, prompt=f"Bo, Enter pressed by habit, {size(person)}", candidates=2)
    person.evaluate(
        "window.sent = 0; document.querySelector('form.batch-form')"
        ".addEventListener('submit', e => { window.sent += 1; e.preventDefault(); })"
    )

    hint = person.get_by_test_id("enter-hint")
    expect(hint).to_be_hidden()
    person.locator('input[name="title"]').fill("Enter")
    person.locator('input[name="title"]').press("Enter")
    # Found by a browser review: Enter in the title did nothing, and said nothing either.
    expect(hint).to_have_text("Nothing was started: press \u201cStart 2 paid jobs\u201d to start.")
    person.locator('input[name="candidates_openai"]').press("Enter")
    person.get_by_label("Bo", exact=True).press("Enter")

    assert person.evaluate("window.sent") == 0
    start_button(person).press("Enter")
    assert person.evaluate("window.sent") == 1


@pytest.mark.parametrize("field", ["subject box", "frame box", "count"])
def test_enter_without_script_comes_back_asking_for_the_button(
    browser: Browser, studio: Studio, field: str
):
    """Found by a re-review: without script, Enter on a box pressed the Start button."""
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page)
        fill_batch(page, prompt=f"Bo, no script, Enter on the {field}", candidates=2)
        target = {
            "subject box": page.get_by_label("Bo", exact=True),
            "frame box": page.get_by_label("image", exact=True),
            "count": page.locator('input[name="candidates_openai"]'),
        }[field]

        target.press("Enter")

        expect(page.get_by_test_id("entered")).to_have_text(
            "Nothing was started: press “Start 2 paid jobs” to start them."
        )
        assert page.url.endswith("/batches/new/"), page.url
        start_button(page).click()
        expect(
            page.get_by_role("heading", name=f"Bo, no script, Enter on the {field}")
        ).to_be_visible()
    finally:
        context.close()


def test_without_script_a_button_naming_a_stale_number_starts_nothing(
    browser: Browser, studio: Studio
):
    """Found by a review: without script "Start 0 paid jobs" started the jobs typed since."""
    context = browser.new_context(base_url=studio.url, viewport=DESKTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page)
        prompt = "Bo, no script, the button as served"
        fill_batch(page, prompt=prompt, candidates=2)
        expect(start_button(page)).to_have_text("Start 0 paid jobs")  # as the page was served

        start_button(page).click()

        expect(page.get_by_test_id("entered")).to_have_text(
            "Nothing was started: press “Start 2 paid jobs” to start them."
        )
        expect(start_button(page)).to_have_text("Start 2 paid jobs")
        start_button(page).click()
        expect(page.get_by_role("heading", name=prompt)).to_be_visible()
    finally:
        context.close()


def test_space_on_the_button_still_starts_the_batch(person: Page):
    prompt = f"Bo, started with the space bar, {size(person)}"
    fill_batch(person, prompt=prompt, candidates=1)

    start_button(person).press("Space")

    expect(person.get_by_role("heading", name=prompt)).to_be_visible()


# --- the skip link -----------------------------------------------------------------------------


def test_the_first_tab_offers_to_skip_the_header_and_enter_takes_it(person: Page):
    """Found by a review: every page had eight stops in its header before its own content."""
    person.goto("/subjects/")
    person.keyboard.press("Tab")

    skip = person.get_by_role("link", name="Skip to the page's content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    box = skip.bounding_box()
    assert box is not None and box["y"] >= 0 and box["height"] >= 24, box

    person.keyboard.press("Enter")
    person.keyboard.press("Tab")
    inside = person.evaluate("document.activeElement.closest('main') !== null")
    assert inside, "the Tab after the skip went back to the header"


# --- the selection bar -------------------------------------------------------------------------


def test_the_selection_bar_never_hides_the_focused_box(person: Page, twelve: int):
    person.goto("/gallery/")
    tiles = person.locator("ul.grid > li")

    for n in (4, 9, 14):
        # The picture's link has focus, and the page was scrolled (by a wheel, a swipe) until
        # its box lies at the foot of the screen, where the bar is: Tab moves to the box.
        tiles.nth(n).get_by_role("link").focus()
        person.evaluate(FOOT, n)
        person.keyboard.press("Tab")

        expect(tiles.nth(n).get_by_role("checkbox")).to_be_focused()
        assert person.evaluate(BOX_HIDDEN) is False, f"the bar hides picture {n + 1}'s box"


# --- moving a set's images -----------------------------------------------------------------


def test_a_move_comes_back_to_the_moved_image_with_its_button_focused(person: Page, twelve: int):
    person.goto(f"/sets/{twelve}/")
    chosen = person.locator("[data-testid=chosen] > li")
    asset = chosen.nth(9).get_attribute("data-asset")

    chosen.nth(9).get_by_role("button", name=re.compile(r" later$")).press("Enter")

    moved = chosen.nth(10)
    expect(moved).to_have_attribute("data-asset", str(asset))
    expect(moved).to_be_in_viewport()
    expect(moved.get_by_role("button", name=re.compile(r" later$"))).to_be_focused()

    # Later again: last now, and Later is off, so its Earlier button has the focus.
    person.keyboard.press("Enter")
    expect(chosen.last).to_have_attribute("data-asset", str(asset))
    expect(chosen.last.get_by_role("button", name=re.compile(r" earlier$"))).to_be_focused()

    person.keyboard.press("Enter")
    expect(chosen.nth(10)).to_have_attribute("data-asset", str(asset))
    expect(chosen.nth(10).get_by_role("button", name=re.compile(r" earlier$"))).to_be_focused()
    audit(person)
