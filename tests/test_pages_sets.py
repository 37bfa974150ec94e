"""The set pages: choosing a set's images, publishing it, honest about missing history."""

from datetime import UTC, datetime

import pytest
from django.test import Client, override_settings

from studio import engine
from studio.models import AvatarSet, Origin
from tests.factories import stored_asset
from tests.studio_pages import messages_of, text, walk

pytestmark = pytest.mark.django_db

PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


# --- sets --------------------------------------------------------------------------------


def chosen_order(avatar_set: AvatarSet) -> list[int]:
    return list(avatar_set.items.order_by("position").values_list("asset_id", flat=True))


def test_it_creates_a_set_from_the_images_ticked_in_the_gallery(signed_in: Client):
    a, b = stored_asset(21), stored_asset(22)

    response = signed_in.post("/sets/", {"name": "Family", "assets": [b.pk, a.pk]}, follow=True)

    avatar_set = AvatarSet.objects.get()
    assert avatar_set.name == "Family"
    assert chosen_order(avatar_set) == [b.pk, a.pk]
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/"
    assert "Created the set Family." in messages_of(response)


def test_it_adds_orders_and_removes_chosen_images(signed_in: Client):
    a, b, c = stored_asset(31), stored_asset(32), stored_asset(33)
    avatar_set = engine.create_set(name="Family", asset_ids=[])
    url = f"/sets/{avatar_set.pk}/"

    added = signed_in.post(url, {"action": "add", "assets": [a.pk, b.pk, c.pk]}, follow=True)
    assert chosen_order(avatar_set) == [a.pk, b.pk, c.pk]
    assert messages_of(added) == ["Added 3 images to Family."]  # once said nothing (a review)

    signed_in.post(url, {"action": "up", "asset": c.pk})
    assert chosen_order(avatar_set) == [a.pk, c.pk, b.pk]

    signed_in.post(url, {"action": "down", "asset": a.pk})
    assert chosen_order(avatar_set) == [c.pk, a.pk, b.pk]

    signed_in.post(url, {"action": "remove", "asset": a.pk})
    assert chosen_order(avatar_set) == [c.pk, b.pk]

    page = signed_in.get(url).content.decode()
    chosen, offered = page.split("Add images", 1)
    assert chosen.index(f"/assets/{c.pk}/thumb/") < chosen.index(f"/assets/{b.pk}/thumb/")
    assert f'value="{a.pk}"' in offered and f'value="{b.pk}"' not in offered


def test_it_refuses_to_add_an_image_that_does_not_exist(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[])

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/", {"action": "add", "assets": [424242]}, follow=True
    )

    assert messages_of(response) == ["Unknown asset: 424242."]
    assert chosen_order(avatar_set) == []


def test_it_asks_for_ticked_images_before_adding_nothing(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[])
    version = avatar_set.version

    response = signed_in.post(f"/sets/{avatar_set.pk}/", {"action": "add"}, follow=True)

    assert messages_of(response) == ["Tick the images to add first."]
    avatar_set.refresh_from_db()
    assert avatar_set.version == version


def test_it_publishes_a_set_and_shows_it_read_only(signed_in: Client):
    a, b = stored_asset(41, label="First"), stored_asset(42, label="Second")
    avatar_set = engine.create_set(name="Family", asset_ids=[b.pk, a.pk])

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/publish/",
        {"confirm": "yes", "version": avatar_set.version},
        follow=True,
    )

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is not None
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/published/"
    page = text(response)
    assert "Published Family." in messages_of(response)
    assert page.index("1. Second") < page.index("2. First")
    body = response.content.decode()
    assert "<button" not in body.split("</header>", 1)[1]  # nothing to press: read-only
    assert f'href="/assets/{b.pk}/original/"' in body


@override_settings(TIME_ZONE="Europe/Paris")
def test_every_page_says_when_a_set_was_published_in_the_studios_time_zone(signed_in: Client):
    """The published page wrote "UTC" after a time drawn in the studio's zone
    (`AVATARS_TIME_ZONE`): 13:30 in Paris read "12:30 UTC" on the sets' list and "13:30 UTC"
    there. Each page names the zone it writes the time in."""
    avatar_set = engine.create_set(name="Family", asset_ids=[stored_asset(61).pk])
    noon = datetime(2026, 7, 1, 11, 30, tzinfo=UTC)  # 13:30 in Paris, in summer
    AvatarSet.objects.filter(pk=avatar_set.pk).update(published_at=noon)

    pages = ("/sets/", f"/sets/{avatar_set.pk}/", f"/sets/{avatar_set.pk}/published/")
    for url in pages:
        page = text(signed_in.get(url))
        assert "2026-07-01 13:30 CEST" in page, (url, page)
        assert "UTC" not in page, (url, page)


def test_it_refuses_to_publish_with_the_guards_sentence_while_history_is_missing(
    signed_in: Client,
):
    fine, lost = stored_asset(51), stored_asset(52, history_id="")
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk, lost.pk])

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/publish/",
        {"confirm": "yes", "version": avatar_set.version},
        follow=True,
    )

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/"
    assert messages_of(response) == [PUBLISH_REFUSED]
    assert PUBLISH_REFUSED in text(response)
    assert "1 chosen image still lacks Ember history" in text(response)
    assert signed_in.get(f"/sets/{avatar_set.pk}/published/").status_code == 404


def test_it_keeps_a_published_sets_choice_fixed(signed_in: Client):
    fine, lost = stored_asset(61), stored_asset(62, history_id="")
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk])
    engine.publish(avatar_set=avatar_set)

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/", {"action": "add", "assets": [lost.pk]}, follow=True
    )

    assert chosen_order(avatar_set) == [fine.pk]
    assert messages_of(response) == ["This set is published; its choice can no longer change."]


def test_it_pages_the_sets_newest_first_each_once(signed_in: Client, django_assert_max_num_queries):
    AvatarSet.objects.bulk_create(AvatarSet(name=f"Set {n}") for n in range(120))
    newest_first = list(
        AvatarSet.objects.order_by("-created_at", "-pk").values_list("pk", flat=True)
    )
    chosen = AvatarSet.objects.get(pk=newest_first[0])
    engine.choose_assets(avatar_set=chosen, asset_ids=[stored_asset(1).pk, stored_asset(2).pk])

    seen, pages = walk(signed_in, "/sets/", r'href="/sets/(\d+)/"', django_assert_max_num_queries)

    assert seen == newest_first
    assert len(pages) == 3
    assert f"{chosen.name} 2 draft" in text(pages[0])


def test_adding_an_image_already_in_the_set_changes_nothing_not_even_its_version(
    signed_in: Client, subject
):
    """A no-op used to move the version: an open publish page then asked again for nothing."""
    asset = stored_asset(61, origin=Origin.UPLOADED, subject=subject)
    avatar_set = engine.create_set(name="Family", asset_ids=[asset.pk])
    version = avatar_set.version

    response = signed_in.post(
        f"/assets/{asset.pk}/add-to-set/", {"set": avatar_set.pk}, follow=True
    )

    assert messages_of(response) == ["Already in Family."]
    avatar_set.refresh_from_db()
    assert avatar_set.version == version, f"version {version} moved to {avatar_set.version}"
    assert chosen_order(avatar_set) == [asset.pk]
