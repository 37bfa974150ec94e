"""Several reference photos chosen at once, at a desktop's and a phone's size.

Left by a browser review: a family adding a subject's photos picked and uploaded them one
at a time. The field takes several; they go one after another (the server takes one photo
a request), and the page then says which were added and which were refused, and why.
"""

import io
import re
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, Route, expect

from tests.e2e.studio import (
    PASSWORD,
    USERNAME,
    add_subject,
    audit,
    fits_the_screen,
    screenshot,
    sign_in,
    size,
)

NOT_A_PHOTO = "The file is not a PNG, JPEG, WebP or GIF image."


def photo(path: Path, colour: tuple[int, int, int]) -> Path:
    out = io.BytesIO()
    Image.new("RGB", (160, 120), colour).save(out, "PNG")
    path.write_bytes(out.getvalue())
    return path


def test_several_photos_chosen_at_once_are_each_added_or_refused_in_words(
    person: Page, tmp_path: Path
):
    name = f"Fay at {size(person)}"
    add_subject(person, name)
    notes = tmp_path / "notes.png"
    notes.write_text("a shopping list, not a photo")
    shade = len(size(person))  # each size photos of its own: the same bytes are one photo
    chosen = [
        photo(tmp_path / "beach.png", (230, 200, shade)),
        notes,
        photo(tmp_path / "garden.png", (60, 160, shade)),
    ]
    expect(person.get_by_text("Several can be chosen at once.")).to_be_visible()

    person.get_by_label("Add a reference photo").set_input_files(chosen)
    person.get_by_role("button", name="Upload").click()

    refused = person.locator("#photos-refused")
    expect(refused).to_have_text(f"1 photo was not uploaded:notes.png: {NOT_A_PHOTO}")
    expect(refused).to_have_attribute("role", "alert")
    expect(refused).to_be_focused()  # a review found focus left on the page after the reload
    for added in ("beach.png", "garden.png"):
        expect(person.get_by_text(f"Added {added} to {name}'s photos.")).to_be_visible()
    expect(person.locator("ul.grid > li")).to_have_count(2)
    audit(person)
    fits_the_screen(person)
    screenshot(person, "photos-several")

    person.reload()  # said once: the refusals were for that upload only
    expect(person.locator("#photos-refused")).to_have_count(0)
    expect(person.locator("ul.grid > li")).to_have_count(2)


def test_photos_sent_after_the_sign_in_ran_out_are_said_not_uploaded(page: Page, tmp_path: Path):
    """Found by a re-review: the script took the sign-in page's redirect for a photo taken,
    and went on sending the rest, each into the same refusal."""
    sign_in(page)
    add_subject(page, "Gus")
    chosen = [photo(tmp_path / f"{n}.png", (20, 40 * n, 90)) for n in (1, 2)]
    page.context.clear_cookies(name="sessionid")  # the sign-in runs out, the page open

    page.get_by_label("Add a reference photo").set_input_files(chosen)
    page.get_by_role("button", name="Upload").click()

    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/subjects/"))
    page.get_by_label("Username").fill(USERNAME)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Gus", exact=True)).to_be_visible()
    refused = page.locator("#photos-refused")
    expect(refused).to_contain_text("2 photos were not uploaded:")
    expect(refused).to_contain_text("1.png: It was not uploaded: you are no longer signed in.")
    expect(refused).to_contain_text("2.png: Not sent: you are no longer signed in.")
    expect(page.locator("ul.grid > li")).to_have_count(0)


def test_leaving_while_photos_are_on_their_way_asks_first(page: Page, tmp_path: Path):
    """Found by a review: leaving the page while several photos went one by one gave no
    word, and the photos not yet sent were lost unsaid."""
    sign_in(page)
    add_subject(page, "Hal")
    chosen = [photo(tmp_path / f"{n}.png", (90, 30 * n, 10)) for n in (1, 2)]
    held: list[str] = []  # the first photo's request, held on its way as on a slow line

    def hold(route: Route) -> None:
        if route.request.method == "POST":
            held.append(route.request.url)  # never answered while the test looks
        else:
            route.continue_()

    page.route(re.compile(r"/subjects/\d+/$"), hold)
    page.get_by_label("Add a reference photo").set_input_files(chosen)
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_text("Uploading 1 of 2: 1.png…")).to_be_visible()
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.type), dialog.dismiss()))

    page.close(run_before_unload=True)
    page.wait_for_timeout(500)

    assert asked == ["beforeunload"], f"leaving mid-upload asked {asked}"
    assert held, "the photo was not on its way"
