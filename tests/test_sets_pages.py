"""Sets that are easy: ticking order kept, dragging into order, publishing asked once."""

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from studio import engine, originals
from studio.models import AvatarSet, Origin
from tests.factories import plan, stored_asset
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db

# The shared cast of the studio pages: a person, signed in.

EMPTY_SET = "A set needs at least one image: tick the images it should hold first."


def chosen_order(avatar_set: AvatarSet) -> list[int]:
    return list(avatar_set.items.order_by("position").values_list("asset_id", flat=True))


def test_it_refuses_to_create_an_empty_set_with_a_sentence(signed_in: Client):
    response = signed_in.post("/sets/", {"name": "Nothing yet"})

    assert response.status_code == 400
    assert EMPTY_SET in text(response)
    assert not AvatarSet.objects.exists()


def test_it_goes_back_to_the_gallery_when_a_set_cannot_be_created(signed_in: Client):
    response = signed_in.post(
        "/sets/", {"name": "", "assets": [stored_asset(1).pk], "next": "/gallery/?page=2"}
    )

    assert response.status_code == 302 and response["Location"] == "/gallery/?page=2"
    assert not AvatarSet.objects.exists()


def test_it_never_follows_a_next_that_leaves_the_studio(signed_in: Client):
    response = signed_in.post("/sets/", {"name": "x", "next": "https://elsewhere.test/"})

    assert response.status_code == 400
    assert EMPTY_SET in text(response)


def test_it_adds_ticked_images_in_the_order_they_were_ticked(signed_in: Client):
    a, b, c, d = (stored_asset(seed) for seed in (1, 2, 3, 4))
    avatar_set = engine.create_set(name="Family", asset_ids=[a.pk])

    signed_in.post(
        f"/sets/{avatar_set.pk}/",
        {"action": "add", "assets": [b.pk, c.pk, d.pk], "order": f"{d.pk},junk,{b.pk}"},
    )

    assert chosen_order(avatar_set) == [a.pk, d.pk, b.pk, c.pk]


def test_it_takes_a_dragged_order_through_the_same_form(signed_in: Client):
    a, b, c = (stored_asset(seed) for seed in (1, 2, 3))
    avatar_set = engine.create_set(name="Family", asset_ids=[a.pk, b.pk, c.pk])

    signed_in.post(f"/sets/{avatar_set.pk}/", {"action": "order", "assets": [c.pk, a.pk, b.pk]})

    assert chosen_order(avatar_set) == [c.pk, a.pk, b.pk]


def test_it_keeps_an_image_chosen_meanwhile_when_a_dragged_order_misses_it(signed_in: Client):
    a, b, c = (stored_asset(seed) for seed in (1, 2, 3))
    avatar_set = engine.create_set(name="Family", asset_ids=[a.pk, b.pk, c.pk])

    # The page was loaded before c was added (another tab): its order names only a and b.
    signed_in.post(f"/sets/{avatar_set.pk}/", {"action": "order", "assets": [b.pk, a.pk]})

    assert chosen_order(avatar_set) == [b.pk, a.pk, c.pk]


def test_it_offers_drag_and_drop_beside_the_move_buttons(signed_in: Client):
    a, b = stored_asset(1), stored_asset(2)
    avatar_set = engine.create_set(name="Family", asset_ids=[a.pk, b.pk])

    body = signed_in.get(f"/sets/{avatar_set.pk}/").content.decode()

    assert body.count('draggable="true"') == 2
    assert 'data-reorder="reorder-form"' in body and 'id="reorder-form"' in body
    assert body.count('value="up"') == 2 and body.count('value="down"') == 2


def test_it_disables_publish_and_says_why_while_history_is_missing(signed_in: Client):
    fine, lost = stored_asset(1), stored_asset(2, history_id="")
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk, lost.pk])

    body = signed_in.get(f"/sets/{avatar_set.pk}/").content.decode()

    button = re.search(r"<button[^>]*>Publish…</button>", body)
    assert button is not None
    assert "disabled" in button.group(0) and 'aria-describedby="publish-why"' in button.group(0)
    why = re.search(r'<p[^>]*id="publish-why"[^>]*>([^<]*)</p>', body)
    assert why is not None
    assert why.group(1) == (
        "1 chosen image still lacks Ember history; publishing waits for repair."
    )


def test_it_disables_publish_and_names_the_images_whose_original_is_gone(signed_in: Client):
    """Found by a review: the set page offered Publish, the answer named a database id
    that read as another image's, and no tile said which was missing."""
    first, second, third = stored_asset(1), stored_asset(2), stored_asset(3)
    avatar_set = engine.create_set(name="Family", asset_ids=[third.pk, first.pk, second.pk])
    originals.path_of(first.sha256, first.mime).unlink()

    for page in (f"/sets/{avatar_set.pk}/", f"/sets/{avatar_set.pk}/publish/"):
        body = signed_in.get(page).content.decode()

        assert "Publish for good" not in body, page
        why = re.search(r'<p[^>]*id="publish-why"[^>]*>([^<]*)</p>', body)
        assert why is not None, page
        assert why.group(1) == (
            "Image 2 of this set has lost its original: it is not in the store, and "
            "publishing waits until it is back."
        )
    body = signed_in.get(f"/sets/{avatar_set.pk}/").content.decode()
    button = re.search(r"<button[^>]*>Publish…</button>", body)
    assert button is not None and "disabled" in button.group(0)
    captions = re.findall(r'<span class="caption">(.*?)</span>\s*(?:<form|</li>)', body, re.S)
    assert ["original missing" in caption for caption in captions] == [False, True, False]


def test_it_says_who_repairs_a_blocked_set_and_links_staff_to_each_task(
    client: Client, person, subject
):
    [task] = plan(subject)
    lost = stored_asset(2, history_id="", task=task)
    avatar_set = engine.create_set(name="Family", asset_ids=[lost.pk])
    client.force_login(person)

    as_family = text(client.get(f"/sets/{avatar_set.pk}/"))
    person.is_staff = True
    person.save()
    as_staff = client.get(f"/sets/{avatar_set.pk}/").content.decode()

    assert "An operator repairs that from the admin" in as_family
    assert "waiting for Ember's record" in as_family
    assert "Repair in admin" not in as_family
    assert f'href="/admin/studio/task/{task.pk}/change/"' in as_staff
    assert "Repair in admin" in as_staff


def test_it_offers_publish_once_the_set_can_be_published(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])

    body = signed_in.get(f"/sets/{avatar_set.pk}/").content.decode()

    assert f'<a class="button primary" href="/sets/{avatar_set.pk}/publish/">Publish…</a>' in body
    assert "publish-why" not in body


def test_it_asks_once_that_publishing_cannot_be_undone_and_publishes_nothing_before(
    signed_in: Client,
):
    avatar_set = engine.create_set(
        name="Family", asset_ids=[stored_asset(1).pk, stored_asset(2).pk]
    )

    asked = signed_in.get(f"/sets/{avatar_set.pk}/publish/")
    unconfirmed = signed_in.post(f"/sets/{avatar_set.pk}/publish/")

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None
    for response in (asked, unconfirmed):
        assert response.status_code == 200
        assert "Publishing cannot be undone." in text(response)
        assert "these 2 images in this order" in text(response)
        assert 'name="confirm" value="yes"' in response.content.decode()

    confirmed = signed_in.post(
        f"/sets/{avatar_set.pk}/publish/", {"confirm": "yes", "version": avatar_set.version}
    )

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is not None
    assert confirmed["Location"] == f"/sets/{avatar_set.pk}/published/"


def test_the_publish_question_shows_the_images_in_the_order_it_speaks_of(signed_in: Client):
    """Found by a browser review: "these 3 images in this order", and no image shown."""
    first, second, third = stored_asset(1), stored_asset(2), stored_asset(3)
    avatar_set = engine.create_set(name="Family", asset_ids=[third.pk, first.pk, second.pk])

    body = signed_in.get(f"/sets/{avatar_set.pk}/publish/").content.decode()

    shown = re.search(
        r'<ol class="thumbs to-publish" data-testid="to-publish">(.*?)</ol>', body, re.S
    )
    assert shown, body
    thumbs = re.findall(r'src="/assets/(\d+)/thumb/128/[^"]*" alt="(\d+)\. ', shown.group(1))
    assert thumbs == [(str(third.pk), "1"), (str(first.pk), "2"), (str(second.pk), "3")], thumbs


def test_it_asks_about_one_image_in_the_singular(signed_in: Client):
    """Found by a review: "Sibling apps will read these 1 image in this order"."""
    avatar_set = engine.create_set(name="Solo", asset_ids=[stored_asset(1).pk])

    asked = text(signed_in.get(f"/sets/{avatar_set.pk}/publish/"))

    assert "Sibling apps will read this one image, and" in asked, asked


def test_it_says_which_chosen_images_are_reference_photos_before_publishing(signed_in: Client):
    """Found by a review: a real photo ticked in the gallery was one click from sibling apps,
    and the page asking said only "this one image"."""
    photo = stored_asset(2, origin=Origin.UPLOADED)
    photos = [stored_asset(1).pk, photo.pk, stored_asset(3, origin=Origin.UPLOADED).pk]
    two = engine.create_set(name="Family", asset_ids=photos)
    one = engine.create_set(name="Bo", asset_ids=[stored_asset(4).pk, photo.pk])
    none = engine.create_set(name="Avatars", asset_ids=[stored_asset(5).pk])

    said = {s.name: text(signed_in.get(f"/sets/{s.pk}/publish/")) for s in (two, one, none)}

    assert (
        "Images 2 and 3 of this set are reference photos, real photos rather than avatars: "
        "sibling apps will read them too. To leave them out, remove them from the set first."
    ) in said["Family"], said["Family"]
    assert (
        "Image 2 of this set is a reference photo, a real photo rather than an avatar: "
        "sibling apps will read it too."
    ) in said["Bo"], said["Bo"]
    assert "reference photo" not in said["Avatars"], said["Avatars"]
    assert all("Publishing cannot be undone." in page for page in said.values())


def test_it_explains_a_blocked_set_on_its_publish_page_and_offers_no_publish(
    client: Client, person, subject
):
    """Found by a review: the set page hid Publish, but its URL still asked "Publish for
    good", and only the answer was refused."""
    [task] = plan(subject)
    fine, lost = stored_asset(1), stored_asset(2, history_id="", task=task)
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk, lost.pk])
    person.is_staff = True
    person.save()
    client.force_login(person)
    url = f"/sets/{avatar_set.pk}/publish/"

    asked, unconfirmed = client.get(url), client.post(url)
    confirmed = client.post(url, {"confirm": "yes", "version": avatar_set.version})

    for response in (asked, unconfirmed):
        assert response.status_code == 200
        page, body = text(response), response.content.decode()
        assert "1 chosen image still lacks Ember history; publishing waits for repair." in page
        assert "An operator repairs that from the admin" in page
        assert f'href="/admin/studio/task/{task.pk}/change/"' in body
        assert 'name="confirm"' not in body and "Publish for good" not in body
        assert "Publishing cannot be undone." not in page
    assert (confirmed.status_code, confirmed["Location"]) == (302, f"/sets/{avatar_set.pk}/")
    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None


def test_it_shows_the_url_sibling_apps_read_a_published_set_at(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    engine.publish(avatar_set=avatar_set)

    response = signed_in.get(f"/sets/{avatar_set.pk}/published/")

    assert f"http://testserver/api/v1/sets/{avatar_set.pk}" in text(response)
    assert signed_in.get(f"/api/v1/sets/{avatar_set.pk}").status_code == 401  # a token's URL


def test_it_names_the_subjects_and_batch_of_images_offered_for_a_set(
    signed_in: Client, make_subject
):
    ada = make_subject("Ada")
    offered = stored_asset(1, label="GPT Image · image #1")
    offered.subjects.add(ada)
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(2).pk])

    page = text(signed_in.get(f"/sets/{avatar_set.pk}/")).split("Add images", 1)[1]

    assert "Ada · GPT Image · image #1" in page


def test_it_sends_a_refused_add_back_with_the_reason(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])

    response = signed_in.post(f"/sets/{avatar_set.pk}/", {"action": "order"}, follow=True)

    assert messages_of(response) == ["Say the new order of the chosen images."]


def test_it_says_the_time_a_set_was_published_is_utc(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    engine.publish(avatar_set=avatar_set)
    AvatarSet.objects.filter(pk=avatar_set.pk).update(
        published_at=datetime(2025, 3, 4, 5, 6, tzinfo=UTC)
    )

    listed, shown = signed_in.get("/sets/"), signed_in.get(f"/sets/{avatar_set.pk}/")

    assert "2025-03-04 05:06 UTC" in text(listed)
    assert "Published 2025-03-04 05:06 UTC" in text(shown)


def test_it_says_on_an_empty_sets_publish_page_that_it_waits_for_an_image(signed_in: Client):
    avatar_set = engine.create_set(name="Nobody yet", asset_ids=[])
    url = f"/sets/{avatar_set.pk}/publish/"

    asked = signed_in.get(url)
    confirmed = signed_in.post(url, {"confirm": "yes", "version": avatar_set.version})

    assert "Publishing waits until the set holds at least one image." in text(asked)
    assert 'name="confirm"' not in asked.content.decode()
    assert (confirmed.status_code, confirmed["Location"]) == (302, f"/sets/{avatar_set.pk}/")
    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None


def test_it_asks_again_when_the_set_changed_since_its_publish_page_was_shown(
    signed_in: Client,
):
    """Found by a review in two tabs: the publish page asked about two images, another tab
    changed the choice to three, and "Publish for good" published the three unasked."""
    one, two, three = stored_asset(1), stored_asset(2), stored_asset(3)
    avatar_set = engine.create_set(name="Family", asset_ids=[one.pk, two.pk])
    url = f"/sets/{avatar_set.pk}/publish/"
    shown = avatar_set.version
    assert f'name="version" value="{shown}"' in signed_in.get(url).content.decode()
    engine.choose_assets(avatar_set=avatar_set, asset_ids=[one.pk, two.pk, three.pk])

    stale = signed_in.post(url, {"confirm": "yes", "version": shown}, follow=True)

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None
    assert stale.redirect_chain[-1][0] == url  # asked again, about the set as it is now
    assert "This set changed since it was shown" in text(stale)
    assert "these 3 images in this order" in text(stale)
    fresh = signed_in.post(url, {"confirm": "yes", "version": avatar_set.version})
    avatar_set.refresh_from_db()
    assert avatar_set.published_at is not None, fresh
