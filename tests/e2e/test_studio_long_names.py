"""Long names without a space in a real browser at a phone's size: a 120-character subject,
a long photo file name, batch title and set name wrap; no page grows wider than the screen.
"""

import time

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.studio import Studio, audit, fits_the_screen, go, sign_in

NAME = ("Maximiliana" * 11)[:120]
NEW_NAME = ("Bartholomew" * 11)[:120]
FILE = "holiday-" + "x" * 200 + ".png"
TITLE = ("Bytheseaside" * 17)[:200]
SET = ("Favourites" * 12)[:120]
LATE = 0.5  # seconds the stylesheet is held back in the test of a slow one

SEED = f"""
from studio import engine
from tests.factories import batch_request, generated_asset, png_bytes
long = engine.create_subject(name={NAME!r})
photo = engine.add_reference(subject=long, data=png_bytes(4000), file_name={FILE!r})
batch = engine.generate(request=batch_request(long, title={TITLE!r}))
result_of_it = generated_asset(task=batch.tasks.first(), history_id="hist_long")
avatar_set = engine.create_set(name={SET!r}, asset_ids=[photo.pk])
result = {{
    "subject": long.pk, "batch": str(batch.pk), "set": avatar_set.pk, "asset": result_of_it.pk
}}
"""


@pytest.fixture(scope="module")
def named(studio: Studio) -> dict[str, str]:
    """Add a subject, a photo, a batch and a set with long names; return their ids."""
    return dict(studio.stack.django(SEED))


@pytest.fixture
def person(phone: Page, named: dict[str, str]) -> Page:
    sign_in(phone)
    return phone


def test_the_subjects_list_fits_a_phone(person: Page):
    go(person, "Subjects")

    expect(person.get_by_role("link", name=NAME)).to_be_visible()
    fits_the_screen(person)


def test_a_page_whose_stylesheet_comes_late_is_measured_once_it_is_in(person: Page):
    """Found on a busy machine: the list was measured unstyled, as wide as the long name."""
    person.route("**/*.css", lambda route: (time.sleep(LATE), route.continue_()))
    go(person, "Subjects")

    expect(person.get_by_role("link", name=NAME)).to_be_visible()
    fits_the_screen(person)


def test_the_new_batch_forms_subjects_and_photos_fit_a_phone(person: Page):
    go(person, "New batch")
    person.get_by_label(NAME, exact=True).check()

    expect(person.locator(".pick", has_text=FILE)).to_be_visible()
    fits_the_screen(person)
    audit(person)


def test_a_long_names_rename_and_remove_panel_fits_a_phone(person: Page, named: dict[str, str]):
    """Found by a re-review: its hint, naming the subject, widened the page to 1,699 px."""
    person.goto(f"/subjects/{named['subject']}/")
    person.locator("summary", has_text="Rename or remove").first.click()

    expect(person.get_by_label("New name")).to_be_visible()
    fits_the_screen(person)


def test_a_long_rename_message_fits_a_phone(person: Page, named: dict[str, str]):
    person.goto(f"/subjects/{named['subject']}/")
    person.get_by_text(f"Rename or remove {NAME}").click()
    person.get_by_label("New name").fill(NEW_NAME)
    person.get_by_role("button", name="Rename", exact=True).click()

    expect(person.get_by_text(f"Renamed {NAME} to {NEW_NAME}")).to_be_visible()
    fits_the_screen(person)


@pytest.mark.parametrize(
    "where",
    [
        "/",
        "/batches/{batch}/",
        "/gallery/",
        "/sets/",
        "/sets/{set}/",
        "/subjects/{subject}/",
        # Their trails name the batch, the set, the subject (found by a review: 535 px wide).
        "/assets/{asset}/",
        "/sets/{set}/publish/",
        "/sets/{set}/delete/",
        "/subjects/{subject}/remove/",
    ],
)
def test_the_pages_that_show_long_names_fit_a_phone(
    person: Page, named: dict[str, str], where: str
):
    person.goto(where.format(**named))

    fits_the_screen(person)
