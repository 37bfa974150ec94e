"""The batch pages in a browser, at a desktop's and a phone's size: what a family sees.

The spend is named before it happens, the button says what it is doing, progress is said
in words and keeps the person's place, and every page passes the accessibility audit.
"""

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page, expect

from studio.engine.validation import MAX_CANDIDATES
from tests.e2e.studio import (
    SLOW,
    Studio,
    audit,
    cancel_batch,
    fill_batch,
    fits_the_screen,
    go,
    plan_batch,
    screenshot,
    sign_in,
    size,
    start_button,
)

DASH, TIMES = "\u2013", "\u00d7"  # as the pages write them


# --- 1, 2, 9: the new-batch form ----------------------------------------------------------


def test_it_counts_the_paid_jobs_as_the_person_types(person: Page):
    fill_batch(person, prompt="Bo, counted", candidates=2)

    total = person.get_by_test_id("job-total")
    expect(total).to_have_text(f"2 candidates {TIMES} 1 frame = 2 paid jobs")
    person.get_by_label("headshot", exact=True).check()
    person.locator('input[name="candidates_flux"]').fill("1")

    expect(total).to_have_text(f"3 candidates {TIMES} 2 frames = 6 paid jobs")
    expect(start_button(person)).to_have_text("Start 6 paid jobs")
    person.locator('input[name="candidates_openai"]').fill("0")
    expect(start_button(person)).to_have_text("Start 2 paid jobs")
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batch-new")


def test_it_says_beside_the_button_what_the_server_would_refuse_as_the_person_types(
    person: Page,
):
    """Found by a review: the button read "Start 9 paid jobs" past the 8 a provider may
    have, and only the server's answer said why nothing started."""
    go(person, "New batch")
    said = person.get_by_test_id("job-refusal")
    expect(said).to_be_hidden()  # an empty form is not a mistake yet
    fill_batch(person, prompt="Bo, too many", candidates=2)
    expect(said).to_be_hidden()
    boxes = person.locator('input[name="candidates_openai"]')

    for typed, words in [
        (str(MAX_CANDIDATES + 1), f"At most {MAX_CANDIDATES} candidates a provider."),
        ("2.5", "Enter a whole number, like 2 (0 leaves it out)."),
        ("0", "Choose at least one provider."),
    ]:
        boxes.fill(typed)
        expect(said).to_have_text(words)
        expect(said).to_be_visible()
    boxes.fill("2")
    expect(said).to_be_hidden()
    person.get_by_label("image", exact=True).uncheck()
    expect(said).to_have_text("Choose at least one frame.")
    person.get_by_label("image", exact=True).check()
    boxes.fill(str(MAX_CANDIDATES + 1))
    audit(person)
    person.reload()  # the draft puts the count back: said again (a re-review's went unsaid)
    expect(start_button(person)).to_have_text(f"Start {MAX_CANDIDATES + 1} paid jobs")
    expect(said).to_have_text(f"At most {MAX_CANDIDATES} candidates a provider.")

    start_button(person).click()  # the server answers in the same words
    expect(
        person.get_by_text(f"At most {MAX_CANDIDATES} candidates a provider.").first
    ).to_be_visible()


def test_on_a_phone_every_tick_field_and_button_of_the_form_is_a_fingers_size(phone: Page):
    """Found by a browser review at 390 x 844: the subjects' and frames' ticks sat in rows
    23 px tall, the fields and Start were 40 px (WCAG 2.5.5: 44 px)."""
    sign_in(phone)
    fill_batch(phone, prompt="Bo, by finger", candidates=1)
    targets = {
        "a subject": phone.locator("label.check.subject").first,
        "a frame": phone.get_by_label("headshot", exact=True).locator("xpath=.."),
        "a reference photo": phone.locator("label.pick:visible").first,
        "the title": phone.get_by_label("Title", exact=False),
        "a candidate count": phone.locator('input[name="candidates_openai"]'),
        "Start": start_button(phone),
    }

    heights = {name: (t.bounding_box() or {"height": 0})["height"] for name, t in targets.items()}

    small = {name: round(h, 1) for name, h in heights.items() if h < 44}
    assert not small, f"under 44 px on a phone: {small}"
    fits_the_screen(phone)


def test_on_a_phone_the_candidate_counts_line_up_in_one_column(phone: Page):
    """Found by a review at 390 x 844: each count sat after its provider's name and model,
    at a different place on each line."""
    sign_in(phone)
    go(phone, "New batch")
    boxes = phone.locator("input.candidates")
    expect(boxes).not_to_have_count(0)

    lefts = [round((boxes.nth(i).bounding_box() or {"x": -1})["x"]) for i in range(boxes.count())]

    assert max(lefts) - min(lefts) <= 1, f"the counts start at {lefts} px"
    fits_the_screen(phone)


def test_it_disables_the_button_and_says_what_it_is_doing_once_pressed(person: Page):
    fill_batch(person, prompt="Bo, pressed once", candidates=3)
    # Hold the form here after the page's own handler ran, to look at the button.
    person.evaluate(
        "document.querySelector('form.batch-form')"
        ".addEventListener('submit', e => e.preventDefault())"
    )

    start_button(person).click()

    pressed = person.get_by_test_id("start")
    expect(pressed).to_be_disabled()
    expect(pressed).to_have_text("Starting 3 paid jobs…")


def test_it_sends_one_request_for_a_double_click(page: Page):
    sign_in(page)
    fill_batch(page, prompt="Bo, clicked twice", candidates=1)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)

    start_button(page).dblclick()

    expect(page.get_by_role("heading", name="Bo, clicked twice")).to_be_visible()
    assert len(posts) == 1


def test_it_says_the_same_batch_was_started_minutes_ago_and_starts_it_again_on_purpose(
    page: Page,
):
    sign_in(page)
    first = plan_batch(page, prompt="Bo, the same again", candidates=1)

    fill_batch(page, prompt="Bo, the same again", candidates=1)
    start_button(page).click()

    twin = page.get_by_test_id("twin")
    expect(twin).to_contain_text("You started the same batch less than a minute ago")
    # Focus on the question, as the many-jobs one has it (a review found it on the page).
    expect(twin).to_be_focused()
    expect(twin).to_be_in_viewport()
    expect(twin.get_by_role("link", name="Bo, the same again")).to_have_attribute(
        "href", urlparse(first).path
    )
    audit(page)
    start_button(page).click()  # again, without ticking: the notice says what to do
    expect(page.get_by_test_id("tick-to-start")).to_have_text(
        "To start it anyway, tick “Start it again on purpose”, then press “Start 1 paid job”."
    )
    page.get_by_label("Start it again on purpose").check()
    start_button(page).click()
    expect(page.get_by_role("heading", name="Bo, the same again")).to_be_visible()
    assert page.url != first


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_it_asks_a_second_time_before_many_paid_jobs(
    request: pytest.FixtureRequest, size: str, browser: object, no_worker: None
):
    """Found by a review: the question sat below the fold (at 837 px of an 800 px window)
    with the focus at the page's top, so the page looked as if nothing had happened; and
    it stayed, naming 15 jobs, beside a button that named 14."""
    page: Page = request.getfixturevalue("page" if size == "desktop" else "phone")
    prompt = f"Bo, a big batch at {size} size"
    sign_in(page)
    fill_batch(page, prompt=prompt, candidates=7)
    page.get_by_label("headshot", exact=True).check()

    start_button(page).click()

    question = page.get_by_test_id("confirm-jobs")
    expect(question).to_have_text("This starts 14 paid jobs. Start them?")
    expect(question).to_be_focused()
    expect(question).to_be_in_viewport()
    expect(start_button(page)).to_be_in_viewport()
    page.locator('input[name="candidates_openai"]').fill("6")
    expect(question).to_be_hidden()
    page.locator('input[name="candidates_openai"]').fill("7")
    expect(question).to_be_visible()
    start_button(page).click()
    expect(page.get_by_role("heading", name=prompt)).to_be_visible()
    expect(page.get_by_test_id("progress-text")).to_have_text("14 in progress")
    cancel_batch(page)
    expect(page.get_by_test_id("progress-text")).to_have_text("14 cancelled")
    # What was said, the batch's title and its progress all on the screen (a review's phone
    # saw only the progress, the sentence scrolled away above it).
    expect(page.get_by_text("Cancelled 14 tasks.")).to_be_in_viewport()
    expect(page.locator("#said")).to_be_focused()  # scrolled to: a long page keeps it in view
    expect(page.get_by_role("heading", name=prompt)).to_be_in_viewport()
    expect(page.get_by_test_id("progress-text")).to_be_in_viewport()


def test_it_shows_every_error_beside_its_section_at_once(person: Page):
    go(person, "New batch")
    person.get_by_label("image", exact=True).uncheck()

    start_button(person).click()

    for legend, error in [
        ("Subjects", "Choose at least one subject."),
        ("Providers", "Choose at least one provider."),
        ("Frames", "Choose at least one frame."),
    ]:
        section = person.locator("fieldset", has=person.locator("legend", has_text=legend))
        expect(section.locator(".error")).to_have_text(error)
    expect(person.locator(".error").first).to_be_visible()
    # Found by a review: on a phone the page came back at its top, the errors a screen
    # below, nothing said. The summary is there, in view and focused (read out).
    problems = person.get_by_test_id("problems")
    expect(problems).to_be_focused()
    expect(problems).to_be_in_viewport()
    expect(problems).to_contain_text("Subjects: Choose at least one subject.")
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batch-new-errors")


def test_it_shows_reference_photos_of_the_ticked_subjects_only(person: Page):
    go(person, "New batch")
    photo = person.locator(".pick", has_text="bo.png")

    expect(person.get_by_text("Tick a subject to see its photos.")).to_be_visible()
    expect(photo).to_be_hidden()
    person.get_by_label("Bo", exact=True).check()
    expect(photo).to_be_visible()
    person.get_by_label("Bo", exact=True).uncheck()
    expect(photo).to_be_hidden()


def test_back_to_the_form_shows_the_photos_of_the_subjects_ticked_again(
    page: Page, no_worker: None
):
    """Found by a review: after Back the browser ticked Bo again, and the photos section
    said "Tick a subject to see its photos." beside the tick."""
    sign_in(page)
    fill_batch(page, prompt="Bo and Back", candidates=1)
    start_button(page).click()
    expect(page).to_have_url(re.compile(r"/batches/[0-9a-f-]+/$"))

    page.go_back()

    expect(page.get_by_label("Bo", exact=True)).to_be_checked()
    expect(page.locator(".pick", has_text="bo.png")).to_be_visible()
    expect(page.get_by_text("Tick a subject to see its photos.")).to_be_hidden()


def test_it_puts_the_limits_on_the_inputs(page: Page):
    sign_in(page)
    go(page, "New batch")

    field = page.locator('input[name="candidates_openai"]')
    expect(field).to_have_attribute("min", "0")
    expect(field).to_have_attribute("max", "8")
    expect(field).to_have_value("0")
    providers = page.locator("fieldset", has=page.locator("legend", has_text="Providers"))
    expect(providers.locator("legend")).to_contain_text("up to 8")


# --- 3, 4, 5, 10: the batch page and the Batches page ------------------------------------


def test_it_shows_progress_in_words_and_keeps_focus_while_it_polls(person: Page, no_worker: None):
    prompt = f"Bo waits, {size(person)}"
    plan_batch(person, prompt=prompt, candidates=3)
    expect(person.get_by_test_id("progress-text")).to_have_text("3 in progress")
    expect(person).to_have_title(f"0 of 3 ready {DASH} {prompt} · Avatars")
    cancel = person.get_by_role("button", name="Cancel GPT Image image #2")
    cancel.focus()

    for _ in range(2):
        with person.expect_response(re.compile(r"/progress/")):
            pass

    assert person.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Cancel GPT Image image #2"
    )
    expect(cancel).to_be_focused()
    reason = person.locator("[data-testid=task] .reason").first
    expect(reason).to_be_visible()
    expect(reason).to_contain_text("Waiting for the worker")
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batch-running")
    if (person.viewport_size or {"width": 0})["width"] < 600:  # a phone: a finger's 44 px
        cancels = person.get_by_role("button", name=re.compile(r"^Cancel GPT Image")).all()
        heights = [b and b["height"] for b in (c.bounding_box() for c in cancels)]
        assert all(h and h >= 44 for h in heights), f"a task's Cancel on a phone: {heights} px"

    person.get_by_text("Cancel batch…").click()  # asks first, in place
    yes = person.get_by_role("button", name="Yes, cancel them")
    expect(yes).to_be_in_viewport()
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batch-cancel-asked")
    if (person.viewport_size or {"width": 0})["width"] < 600:
        box = yes.bounding_box()  # a review measured 39.6 px
        assert box is not None and box["height"] >= 44, f"Yes on a phone: {box}"
    yes.focus()
    person.keyboard.press("Escape")  # not now: the question closes, focus on its button
    expect(yes).to_be_hidden()
    expect(person.get_by_text("Cancel batch…")).to_be_focused()
    expect(person.get_by_test_id("progress-text")).to_have_text("3 in progress")
    person.keyboard.press("Enter")
    yes.click()
    expect(person.get_by_test_id("progress-text")).to_have_text("3 cancelled")
    expect(person).to_have_title(f"None ready {DASH} {prompt} · Avatars")


def test_it_updates_the_words_and_title_without_a_reload(page: Page):
    sign_in(page)
    prompt = "Bo, watched to the end"
    plan_batch(page, prompt=prompt, candidates=2)
    page.evaluate("window.sameDocument = true")

    expect(page.get_by_test_id("progress-text")).to_have_text("2 ready", timeout=SLOW)
    expect(page).to_have_title(f"All done {DASH} {prompt} · Avatars", timeout=SLOW)
    expect(page.get_by_test_id("task-state")).to_have_text(["Ready", "Ready"])
    expect(page.get_by_text("Cancel batch…")).to_have_count(0)
    assert page.evaluate("window.sameDocument") is True


FAIL_ONE = """
from django.db.models import F
from studio.models import Task
result = Task.objects.filter(batch__title={title!r}, ordinal={ordinal}).update(
    state="failed", phase="Failed", error="Ember could not", next_attempt_at=None,
    version=F("version") + 1,
)
"""


def test_it_says_aloud_when_a_task_comes_to_rest_and_when_the_batch_is_finished(
    person: Page, studio: Studio, no_worker: None
):
    """Found by a review: progress changed 41 times on screen and a screen reader heard
    none of it (the summary is swapped whole; a live region swapped in is not heard)."""
    title = f"Bo, heard, {size(person)}"
    plan_batch(person, prompt=title, candidates=2)
    said = person.get_by_test_id("progress-said")
    expect(said).to_have_attribute("role", "status")
    for _ in range(2):  # polls that change nothing say nothing
        with person.expect_response(re.compile(r"/progress/")):
            pass
    expect(said).to_have_text("")

    assert studio.stack.django(FAIL_ONE.format(title=title, ordinal=1)) == 1
    expect(said).to_have_text("1 in progress · 1 failed", timeout=SLOW)
    assert studio.stack.django(FAIL_ONE.format(title=title, ordinal=2)) == 1
    expect(said).to_have_text("Batch finished: 2 failed", timeout=SLOW)


def test_it_says_when_progress_cannot_be_reached_and_catches_up_once_back(person: Page):
    plan_batch(person, prompt=f"Bo, out of reach, {size(person)}", candidates=2)
    worker = person.get_by_test_id("worker")
    expect(worker).to_have_text("Worker running")
    person.evaluate("window.sameDocument = true")

    person.context.set_offline(True)

    unreachable = person.get_by_test_id("unreachable")
    expect(unreachable).to_have_text(
        "Can't reach Avatars; progress paused. It will catch up when the connection is back."
    )
    expect(unreachable).to_have_attribute("aria-live", "polite")
    expect(worker).to_have_text("Worker: not known while Avatars can't be reached")
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batch-unreachable")
    person.context.set_offline(False)
    expect(person.get_by_test_id("progress-text")).to_have_text("2 ready", timeout=SLOW)
    expect(unreachable).to_be_empty()
    assert person.evaluate("window.sameDocument") is True


def test_it_says_so_when_the_studio_stops_answering_its_polls(page: Page):
    """Found by a review: with the web process stopped, no poll ever failed, and the page
    said "Worker running" for as long as it was stopped."""
    sign_in(page)
    plan_batch(page, prompt="Bo, the server hangs", candidates=2)
    expect(page.get_by_test_id("worker")).to_have_text("Worker running")
    page.route("**/progress/**", lambda route: None)  # asked, never answered

    expect(page.get_by_test_id("unreachable")).to_have_text(
        "Can't reach Avatars; progress paused. It will catch up when the connection is back.",
        timeout=15_000,
    )
    page.unroute("**/progress/**")
    expect(page.get_by_test_id("progress-text")).to_have_text("2 ready", timeout=SLOW)
    expect(page.get_by_test_id("unreachable")).to_be_empty()


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (500, "Avatars could not answer just now; progress paused. It will catch up when it can."),
        # The database out of reach: the cause its own page names (a review heard two).
        (
            503,
            "The studio cannot reach its records just now; progress paused. "
            "It will catch up when they are back.",
        ),
    ],
)
def test_it_says_when_the_studio_answers_its_polls_with_an_error(page: Page, status, said):
    sign_in(page)
    plan_batch(page, prompt=f"Bo, the server errs {status}", candidates=1)
    page.route("**/progress/**", lambda route: route.fulfill(status=status, body="oops"))

    expect(page.get_by_test_id("unreachable")).to_have_text(said)
    # One reason on the page: the server answered, so it is not the connection.
    expect(page.get_by_test_id("worker")).to_have_text(
        "Worker: not known while Avatars cannot answer"
    )


def test_it_lists_batches_newest_first_with_outcomes_and_images(person: Page):
    prompt = f"Bo, newest on the list, {size(person)}"
    plan_batch(person, prompt=prompt, candidates=1)
    expect(person.get_by_test_id("progress-text")).to_have_text("1 ready", timeout=SLOW)

    go(person, "Batches")

    newest = person.get_by_test_id("batch").first
    expect(newest.get_by_role("link", name=prompt)).to_be_visible()
    expect(newest.get_by_test_id("outcome")).to_have_text("1 ready")
    person.wait_for_function(
        "() => { const i = document.querySelector('[data-testid=batch] .thumbs img');"
        " return i && i.complete && i.naturalWidth > 0; }"
    )
    fits_the_screen(person)
    audit(person)
    screenshot(person, "batches")


def test_it_says_what_happens_to_a_stuck_image_and_links_staff_to_the_repair(
    page: Page, studio: Studio
):
    sign_in(page)
    studio.configure_ember(fail_history_writes=True)
    try:
        plan_batch(page, prompt="Bo, whose record Ember lost", candidates=1)
        expect(page.get_by_test_id("task-state")).to_have_text(
            ["Image saved, waiting for Ember's record"], timeout=SLOW
        )
    finally:
        studio.configure_ember(fail_history_writes=False)

    expect(page.get_by_test_id("next-step")).to_have_text(
        "The image is kept; an operator recovers Ember's record before it can be published."
    )
    expect(page.get_by_test_id("progress-text")).to_have_text("1 saved, waiting for Ember's record")
    expect(page.get_by_test_id("attention")).to_contain_text("1 image needs an operator")
    expect(page).to_have_title(re.compile("^0 of 1 ready, 1 saved "))
    expect(page.get_by_role("button", name=re.compile("^Cancel GPT"))).to_have_count(0)
    audit(page)
    screenshot(page, "batch-stuck")

    page.get_by_role("link", name="Repair in admin").click()

    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("History Missing")
