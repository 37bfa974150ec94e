"""Signed out mid-flow, in a real browser: what was sent is not done and is said not to be,
the person signs in again and is back on their page, and the new-batch form has kept what
they typed (in the tab, as they typed it) until a batch was planned from it.
"""

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.studio import (
    PASSWORD,
    USERNAME,
    audit,
    fill_batch,
    fits_the_screen,
    go,
    open_subject,
    plan_batch,
    portrait_png,
    sign_in,
    size,
    start_button,
    wait_until_finished,
)

NOT_DONE = re.compile(r"You were signed out, so what you sent was not done")


def sign_out_behind_their_back(page: Page) -> None:
    """End the session as an expiry does: the browser no longer holds a signed-in cookie."""
    page.context.clear_cookies(name="sessionid")


def sign_in_again(page: Page) -> None:
    """On the sign-in page the studio led them to: say so, then sign in."""
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_text(NOT_DONE)).to_be_visible()
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()


def test_a_new_batch_sent_after_the_sign_in_expired_is_still_typed_in_after_signing_in(
    person: Page,
):
    prompt = f"Bo, signed out mid-form, {size(person)}"
    title = f"Kept through a sign-in, {size(person)}"
    fill_batch(person, prompt=prompt, candidates=1)
    person.get_by_label("Title").fill(title)
    sign_out_behind_their_back(person)

    start_button(person).click()

    expect(person.get_by_text("nothing was started or paid")).to_be_visible()
    fits_the_screen(person)
    audit(person)
    sign_in_again(person)
    expect(person).to_have_url(re.compile(r"/batches/new/$"))
    expect(person.get_by_label("Prompt", exact=True)).to_have_value(prompt)
    expect(person.get_by_label("Title")).to_have_value(title)
    expect(person.get_by_label("Bo", exact=True)).to_be_checked()
    expect(person.locator('input[name="candidates_openai"]')).to_have_value("1")
    expect(start_button(person)).to_have_text("Start 1 paid job")
    start_button(person).click()
    expect(person.get_by_role("heading", name=title)).to_be_visible()
    go(person, "New batch")  # a batch was planned from the draft: the next form is empty
    expect(person.get_by_label("Prompt", exact=True)).to_have_value("")
    go(person, "Batches")
    expect(person.get_by_role("link", name=title)).to_have_count(1)


def test_a_reload_of_the_new_batch_form_keeps_what_was_typed(page: Page):
    sign_in(page)
    fill_batch(page, prompt="Bo, reloaded", candidates=2)
    page.get_by_label("headshot", exact=True).check()

    page.reload()

    expect(page.get_by_label("Prompt", exact=True)).to_have_value("Bo, reloaded")
    expect(page.get_by_label("headshot", exact=True)).to_be_checked()
    expect(start_button(page)).to_have_text("Start 4 paid jobs")
    expect(page.get_by_test_id("draft")).to_contain_text("what you typed before in this tab")
    audit(page)
    page.get_by_role("button", name="Clear the form").click()
    expect(page.get_by_label("Prompt", exact=True)).to_have_value("")
    page.reload()
    expect(page.get_by_label("Prompt", exact=True)).to_have_value("")
    expect(start_button(page)).to_have_text("Start 0 paid jobs")


def test_signing_out_drops_the_draft_so_the_next_person_in_the_tab_starts_empty(page: Page):
    sign_in(page)
    fill_batch(page, prompt="Bo, typed before signing out", candidates=1)

    page.get_by_role("button", name="Sign out").click()
    sign_in(page)
    go(page, "New batch")

    expect(page.get_by_label("Prompt", exact=True)).to_have_value("")
    expect(page.get_by_test_id("draft")).to_be_hidden()


def test_another_person_signed_in_in_the_tab_never_finds_the_draft(page: Page, studio):
    """Found by a review: signed out in another tab, the draft stayed in this one, and the
    next person to sign in here found the last one's prompt."""
    studio.stack.django(
        "from django.contrib.auth.models import User\n"
        "ada = User.objects.get_or_create(username='ada')[0]\n"
        "ada.set_password('another horse battery')\n"
        "ada.save()\n"
        "result = ada.pk"
    )
    sign_in(page)
    fill_batch(page, prompt="Bo, typed by grace", candidates=1)
    other = page.context.new_page()  # another tab of the same browser
    other.goto("/")
    other.get_by_role("button", name="Sign out").click()
    expect(other.get_by_role("heading", name="Sign in")).to_be_visible()

    page.goto("/batches/new/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("another horse battery")
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(re.compile(r"/batches/new/$"))
    expect(page.get_by_label("Prompt", exact=True)).to_have_value("")
    expect(page.get_by_test_id("draft")).to_be_hidden()


def test_favourites_chosen_after_the_sign_in_expired_lead_back_to_the_batch(page: Page):
    sign_in(page)
    url = plan_batch(page, prompt="Bo, favourites after a sign-in", candidates=1)
    wait_until_finished(page, 1)
    page.reload()
    page.locator("[data-testid=results] input[name=assets]").first.check()
    page.get_by_label("Set name").fill("Never made")
    sign_out_behind_their_back(page)

    page.get_by_role("button", name="Choose favourites").click()

    sign_in_again(page)
    expect(page).to_have_url(url)
    go(page, "Sets")
    expect(page.get_by_text("Never made")).to_have_count(0)


def test_a_photo_sent_after_the_sign_in_expired_leads_back_to_its_subject(
    page: Page, tmp_path: Path
):
    sign_in(page)
    open_subject(page, "Bo")
    subject = page.url
    page.get_by_label("Add a reference photo").set_input_files(portrait_png(tmp_path / "late.png"))
    sign_out_behind_their_back(page)

    page.get_by_role("button", name="Upload").click()

    sign_in_again(page)
    expect(page).to_have_url(subject)
    expect(page.get_by_text("late.png")).to_have_count(0)


def test_the_sign_in_boxes_stand_apart_each_under_its_name(person: Page):
    """Found by a review: the boxes sat 6 px from the next one's name, narrower than the
    button below them."""
    person.goto("/accounts/login/")
    username, password = person.get_by_label("Username"), person.get_by_label("Password")
    button = person.get_by_role("button", name="Sign in")
    boxes = {
        name: b.bounding_box() or {}
        for name, b in [("username", username), ("password", password), ("button", button)]
    }
    label = person.locator("label", has=password).bounding_box() or {}

    gap = label["y"] - (boxes["username"]["y"] + boxes["username"]["height"])
    assert gap >= 12, f"the username box ends {gap:.0f} px above the password's name"
    widths = {name: round(box["width"]) for name, box in boxes.items()}
    assert len(set(widths.values())) == 1, f"widths differ (px): {widths}"
    fits_the_screen(person)
