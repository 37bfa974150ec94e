"""A subject and their photo, renamed and removed at a phone's size: asked first, every step.

Found by a review: removing happened at one click, and a refused rename closed its panel.
"""

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.studio import (
    add_subject,
    audit,
    fits_the_screen,
    open_subject,
    portrait_png,
    screenshot,
    sign_in,
)


def check(page: Page, name: str) -> None:
    """Audit the page as it is now, keep its screenshot, and refuse sideways scrolling."""
    page.wait_for_load_state()
    audit(page)
    screenshot(page, name)
    fits_the_screen(page)


TAP = 44  # CSS px, as the header's links on a phone (WCAG 2.5.5)


def every_target_takes_a_finger(page: Page) -> None:
    """Found by a browser review: the way back, the "Rename or remove" toggles and the
    photo picker were 16-21 px tall on a phone."""
    targets = page.locator(".crumbs a, details.edit > summary, input[type=file]").all()
    boxes = [
        (target.evaluate("e => e.outerHTML.slice(0, 60)"), target.bounding_box())
        for target in targets
    ]
    assert len(boxes) >= 4, boxes  # the way back, the subject's and the photo's toggles, the picker
    small = [(what, box) for what, box in boxes if not box or box["height"] < TAP]
    assert not small, f"shorter than {TAP} px on a phone: {small}"


def test_it_asks_before_removing_a_photo_and_a_subject_at_phone_size(phone: Page, tmp_path: Path):
    page = phone
    sign_in(page)
    add_subject(page, "Dee")
    expect(page.get_by_text("up to 25 MB")).to_be_visible()
    page.get_by_label("Add a reference photo").set_input_files(portrait_png(tmp_path / "dee.png"))
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_text("Added dee.png to Dee's photos.")).to_be_visible()
    every_target_takes_a_finger(page)

    remove_photo = page.get_by_role("link", name=re.compile(r"^Remove… dee\.png"))
    page.locator(".tile summary").click()
    remove_photo.click()
    expect(page.get_by_role("heading", name="Remove dee.png?")).to_be_visible()
    check(page, "photo-remove")
    page.get_by_role("link", name="Keep it").click()
    expect(page.get_by_role("img", name="dee.png")).to_be_visible()

    page.locator(".tile summary").click()
    remove_photo.click()
    page.get_by_role("button", name="Remove dee.png").click()
    expect(page.get_by_text("Removed dee.png.")).to_be_visible()
    expect(page.locator("#said")).to_be_focused()  # not the page's top (a review's phone)
    expect(page.get_by_text("No reference photos yet.")).to_be_visible()

    page.get_by_text("Rename or remove Dee").click()
    page.get_by_label("New name").fill("   ")
    page.get_by_role("button", name="Rename", exact=True).click()
    expect(page.get_by_role("alert")).to_have_text("A subject needs a name.")
    expect(page.get_by_label("New name")).to_have_value("   ")
    check(page, "subject-rename-refused")

    page.get_by_role("link", name="Remove Dee…").click()
    expect(page.get_by_role("heading", name="Remove Dee?")).to_be_visible()
    expect(page.get_by_text("This cannot be undone.")).to_be_visible()
    check(page, "subject-remove")
    page.get_by_role("button", name="Remove Dee", exact=True).click()
    expect(page.get_by_role("heading", name="Subjects")).to_be_visible()
    expect(page.get_by_text("Removed Dee.", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Dee", exact=True)).to_have_count(0)

    # Found by a review: the question was a POST's answer, so Back from the Subjects page
    # showed Chromium's "Confirm Form Resubmission" (ERR_CACHE_MISS), not a studio page.
    answer = page.go_back()  # to the question about a subject now gone: asked again, a 404
    assert answer is not None and answer.status == 404, "Back did not reach the studio"


def test_a_photo_past_the_limit_gets_a_page_of_the_studio_leading_back(page: Page, tmp_path: Path):
    """Found by a review: a bare text page about "the request body" left the studio."""
    sign_in(page)
    open_subject(page, "Bo")
    subject_url = page.url
    huge = tmp_path / "huge.png"
    huge.write_bytes(b"\0" * (27 * 1024 * 1024))

    page.get_by_label("Add a reference photo").set_input_files(huge)
    page.get_by_role("button", name="Upload").click()

    expect(page.get_by_role("heading", name="That photo is too large")).to_be_visible()
    expect(page.get_by_text("That photo is too large: the limit is 25 MB.")).to_be_visible()
    audit(page)
    screenshot(page, "too-large")
    page.get_by_role("link", name="Go back").click()
    expect(page).to_have_url(subject_url)


def test_a_refused_photo_is_said_on_its_field_with_the_focus_there(page: Page, tmp_path: Path):
    """Found by a review: "The file is not a PNG, JPEG, WebP or GIF image." showed under the
    form, the field neither marked invalid nor pointing at it, and the focus on the page."""
    sign_in(page)
    add_subject(page, "Eve")
    not_a_photo = tmp_path / "notes.png"
    not_a_photo.write_text("a shopping list, not a photo")

    page.get_by_label("Add a reference photo").set_input_files(not_a_photo)
    page.get_by_role("button", name="Upload").click()

    field = page.get_by_label("Add a reference photo")
    expect(field).to_be_focused()
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_have_accessible_description(
        re.compile(r"^The file is not a PNG, JPEG, WebP or GIF image\.")
    )
    audit(page)
