"""Ticks across pages, in a real browser: the gallery and a set's picker keep them per tab.

The module's install holds more pictures than one gallery page (60) or one picker page (48)
shows, so a person ticks on one page, moves to the next, ticks again and makes one set of
both, in the order ticked.
"""

import re

import pytest
from playwright.sync_api import Page, Route, expect

from tests.e2e.studio import Studio, audit, go, sign_in

PICTURES = 70  # reference photos added to the one the install starts with: two pages of each
COUNT = "ticked-count"

ADD_PICTURES = f"""
from studio import engine
from studio.models import Subject
from tests.factories import png_bytes
bo = Subject.objects.get(name="Bo")
for n in range({PICTURES}):
    engine.add_reference(subject=bo, data=png_bytes(1000 + n), file_name=f"bo-{{n}}.png")
result = None
"""


@pytest.fixture(scope="module", autouse=True)
def pictures(studio: Studio) -> None:
    studio.stack.django(ADD_PICTURES)


@pytest.fixture(params=["page", "phone"])
def person(request: pytest.FixtureRequest) -> Page:
    """A signed-in person at the desktop size, then at the phone size."""
    opened: Page = request.getfixturevalue(request.param)
    sign_in(opened)
    return opened


def tick_first(page: Page) -> str:
    """Tick the first unticked picture on the page; return its asset id."""
    box = page.locator('input[name="assets"]:not(:checked)').first
    value = str(box.get_attribute("value"))
    box.check()
    return value


def box(page: Page, asset_id: str):
    return page.locator(f'input[name="assets"][value="{asset_id}"]')


def older(page: Page) -> None:
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Older →").click()
    expect(page).to_have_url(re.compile(r"page=2"))


def newer(page: Page) -> None:
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="← Newer").click()
    expect(page).to_have_url(re.compile(r"page=1"))


def chosen_in(page: Page) -> list[str]:
    chosen = page.locator("[data-testid=chosen] > li")
    return [str(chosen.nth(i).get_attribute("data-asset")) for i in range(chosen.count())]


def test_the_gallery_keeps_ticks_across_its_pages_and_makes_one_set_of_them(person: Page):
    go(person, "Gallery")
    first = tick_first(person)
    older(person)
    expect(person.get_by_test_id(COUNT)).to_have_text("1 image ticked (1 on other pages)")
    second = tick_first(person)
    expect(person.get_by_test_id(COUNT)).to_have_text("2 images ticked (1 on other pages)")

    newer(person)
    expect(box(person, first)).to_be_checked()
    expect(person.get_by_test_id(COUNT)).to_have_text("2 images ticked (1 on other pages)")
    third = tick_first(person)
    person.get_by_label("Set name").fill("Across pages")
    person.get_by_role("button", name="Create set").click()

    expect(person.get_by_text("Created the set Across pages.")).to_be_visible()
    assert chosen_in(person) == [first, second, third]
    # The ticks went into the set: the gallery starts afresh.
    go(person, "Gallery")
    expect(person).to_have_url(re.compile(r"/gallery/$"))  # the set's page has a count too
    expect(person.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")
    expect(person.locator('input[name="assets"]:checked')).to_have_count(0)


def test_untick_all_clears_the_ticks_of_every_page(person: Page):
    go(person, "Gallery")
    untick = person.get_by_role("button", name="Untick all")
    expect(person).to_have_url(re.compile(r"/gallery/$"))  # hidden on the gallery, not before
    expect(untick).to_be_hidden()
    first = tick_first(person)
    older(person)
    tick_first(person)
    expect(untick).to_be_visible()
    audit(person)

    untick.focus()
    person.keyboard.press("Enter")  # from the keyboard: the button then hides itself

    expect(person.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")
    expect(untick).to_be_hidden()
    # Focus stays in the bar, on the count it changed (a review: it fell to the page's start).
    expect(person.get_by_test_id(COUNT)).to_be_focused()
    newer(person)
    expect(box(person, first)).not_to_be_checked()
    expect(person.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")


def test_a_refused_set_gives_the_ticks_back(page: Page):
    sign_in(page)
    go(page, "Gallery")
    first = tick_first(page)
    older(page)
    second = tick_first(page)
    # Blank once trimmed: the browser sends it, the server refuses it and says why.
    page.get_by_label("Set name").fill("   ")
    page.get_by_role("button", name="Create set").click()

    expect(page.locator(".messages .error")).to_contain_text("required")
    expect(page.get_by_test_id(COUNT)).to_have_text("2 images ticked (1 on other pages)")
    expect(box(page, second)).to_be_checked()
    page.get_by_label("Set name").fill("Second try")
    page.get_by_role("button", name="Create set").click()

    expect(page.get_by_text("Created the set Second try.")).to_be_visible()
    assert chosen_in(page) == [first, second]


def test_a_sets_picker_keeps_ticks_across_its_pages(page: Page):
    sign_in(page)
    go(page, "Gallery")
    start = tick_first(page)
    page.get_by_label("Set name").fill("Picked over pages")
    page.get_by_role("button", name="Create set").click()
    expect(page.get_by_text("Created the set Picked over pages.")).to_be_visible()

    first = tick_first(page)
    older(page)
    second = tick_first(page)
    expect(page.get_by_test_id(COUNT)).to_have_text("2 images ticked (1 on other pages)")
    page.get_by_role("button", name="Add chosen").click()

    expect(page.locator("[data-testid=chosen] > li")).to_have_count(3)
    assert chosen_in(page) == [start, first, second]
    expect(page.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")


def test_a_choose_box_is_a_target_a_finger_can_hit(person: Page):
    """Found by a browser review: the boxes were 13 px (the label around them 22 px tall).

    The box itself is at least 18 px and its label, which ticks it too, at least 24 px
    tall (WCAG 2.5.8's minimum), at both sizes.
    """
    go(person, "Gallery")
    first = person.locator('label.choose:has(input[name="assets"])').first
    tick = first.locator("input").bounding_box()
    label = first.bounding_box()
    assert tick and label
    assert min(tick["width"], tick["height"]) >= 18, f"the box is {tick} px"
    assert label["height"] >= 24, f"the label is {label['height']:.1f} px tall"
    first.click(position={"x": label["width"] - 2, "y": label["height"] / 2})  # its words
    expect(first.locator("input")).to_be_checked()


def test_a_tick_made_before_the_script_arrives_stands(page: Page):
    """Found by CI: a box ticked while the page's script was still on its way was unticked
    by it, since the script took what the tab had kept as the whole truth. On a slow line
    a person would see their tick vanish; the count said nothing was ticked."""
    sign_in(page)
    held: list[Route] = []
    page.route("**/studio/pictures*.js", lambda route: held.append(route), times=1)
    # Not go(), which waits for the script.
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Gallery").click()
    expect(page).to_have_url(re.compile(r"/gallery/$"))
    first = tick_first(page)
    expect(box(page, first)).to_be_checked()
    assert held, "the script was not held back"
    held[0].continue_()

    expect(page.get_by_test_id(COUNT)).to_have_text("1 image ticked")
    expect(box(page, first)).to_be_checked()
    second = tick_first(page)
    page.get_by_label("Set name").fill("Ticked early")
    page.get_by_role("button", name="Create set").click()
    expect(page.get_by_text("Created the set Ticked early.")).to_be_visible()
    assert chosen_in(page) == [first, second]


def test_going_back_does_not_bring_back_ticks_let_go_of(page: Page):
    """The page gone back to shows its boxes as they were left; what the tab kept since
    (here: nothing, after Untick all) is what counts."""
    sign_in(page)
    go(page, "Gallery")
    first = tick_first(page)
    older(page)
    page.get_by_role("button", name="Untick all").click()
    expect(page.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")

    page.go_back()
    expect(page).to_have_url(re.compile(r"/gallery/$"))
    expect(box(page, first)).not_to_be_checked()
    expect(page.get_by_test_id(COUNT)).to_have_text("Nothing ticked yet")


def test_the_set_names_label_stays_beside_its_box(person: Page):
    """Found by a browser review: on a phone "Set name" sat at the bar's far right and its
    box at the start of the next line."""
    go(person, "Gallery")
    tick_first(person)
    label = person.locator(".selection-bar label[for=selection-name]").bounding_box()
    field = person.get_by_label("Set name").bounding_box()
    assert label and field
    gap = field["x"] - (label["x"] + label["width"])
    assert 0 <= gap <= 16, f"the box is {gap:.0f} px after its label ({label}, {field})"
    assert abs(label["y"] + label["height"] / 2 - (field["y"] + field["height"] / 2)) <= 8, (
        f"the label and its box are not on one line: {label}, {field}"
    )
