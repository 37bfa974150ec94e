"""A draft set can be renamed or deleted (its images stay); a published one is for good.

Found by a browser review: a set made by mistake, or two of one name, stayed for ever.
"""

import re

import pytest
from django.test import Client

from studio import curation, engine, originals
from studio.models import Asset, AvatarSet, Subject
from tests.factories import stored_asset
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db

PUBLISHED = (
    "This set is published and sibling apps read it by its name and id; it can no longer be "
    "renamed or deleted."
)


def test_it_renames_a_draft_set_and_refuses_an_empty_name(signed_in: Client):
    family = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    url = f"/sets/{family.pk}/rename/"

    renamed = signed_in.post(url, {"name": "  Holiday "}, follow=True)
    refused = signed_in.post(url, {"name": " \u200b "}, follow=True)

    family.refresh_from_db()
    assert family.name == "Holiday"
    assert messages_of(renamed) == ["Renamed the set Family to Holiday."]
    assert messages_of(refused) == ["A set needs a name."]
    assert refused.redirect_chain == [(f"/sets/{family.pk}/", 302)]


def test_a_published_set_is_neither_renamed_nor_deleted(signed_in: Client):
    family = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    engine.publish(avatar_set=family)
    page = signed_in.get(f"/sets/{family.pk}/").content.decode()

    renamed = signed_in.post(f"/sets/{family.pk}/rename/", {"name": "Other"}, follow=True)
    asked = signed_in.get(f"/sets/{family.pk}/delete/")
    deleted = signed_in.post(f"/sets/{family.pk}/delete/", {"confirm": "yes"}, follow=True)

    assert "Rename or delete" not in page and f"/sets/{family.pk}/delete/" not in page
    assert messages_of(renamed) == [PUBLISHED] and messages_of(deleted) == [PUBLISHED]
    assert "Family cannot be deleted" in text(asked) and 'value="yes"' not in text(asked)
    assert AvatarSet.objects.get().name == "Family"


def test_it_asks_before_deleting_a_set_and_keeps_its_images(signed_in: Client):
    images = [stored_asset(1).pk, stored_asset(2).pk]
    family = engine.create_set(name="Family", asset_ids=images)
    other = engine.create_set(name="Other", asset_ids=images[:1])
    url = f"/sets/{family.pk}/delete/"

    asked = signed_in.get(url)
    unconfirmed = signed_in.post(url)
    assert "Delete the set Family?" in text(asked) and "Its 2 images stay" in text(asked)
    assert unconfirmed.status_code == 200 and AvatarSet.objects.count() == 2

    deleted = signed_in.post(url, {"confirm": "yes"}, follow=True)

    assert deleted.redirect_chain == [("/sets/", 302)]
    assert messages_of(deleted) == ["Deleted the set Family; its images stay in the gallery."]
    assert list(AvatarSet.objects.all()) == [other]
    assert sorted(Asset.objects.values_list("pk", flat=True)) == sorted(images)
    assert list(other.items.values_list("asset_id", flat=True)) == images[:1]


def test_deleting_the_set_a_removed_photo_was_kept_for_deletes_it_after_asking(
    signed_in: Client, subject: Subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    family = engine.create_set(name="Family", asset_ids=[photo.pk, stored_asset(5).pk])
    curation.remove_photo(photo=photo, subject=subject)  # kept only for the set
    stored = originals.path_for(photo.sha256, originals.extension_for(photo.mime))

    asked = text(signed_in.get(f"/sets/{family.pk}/delete/"))
    assert f"Also deleted, original and all, {'since'}" in asked and photo.file_name in asked
    with django_capture_on_commit_callbacks(execute=True):
        deleted = signed_in.post(f"/sets/{family.pk}/delete/", {"confirm": "yes"}, follow=True)

    assert messages_of(deleted) == [
        f"Deleted the set Family; its images stay in the gallery. Deleted with it: "
        f"{photo.file_name}."
    ]
    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert not stored.exists(), "the photo's original went with it"


def test_a_delete_that_a_publish_beat_refuses_and_deletes_nothing():
    family = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    stale = AvatarSet.objects.get(pk=family.pk)  # read before the publish
    engine.publish(avatar_set=family)

    with pytest.raises(engine.InvalidRequest, match="published"):
        engine.delete_set(avatar_set=stale)
    with pytest.raises(engine.InvalidRequest, match="published"):
        engine.rename_set(avatar_set=AvatarSet.objects.get(pk=family.pk), name="Other")

    assert AvatarSet.objects.get().published_at is not None
    assert AvatarSet.objects.get().items.count() == 1


def test_a_rename_read_before_a_change_of_the_choice_still_lands():
    family = engine.create_set(name="Family", asset_ids=[stored_asset(1).pk])
    stale = AvatarSet.objects.get(pk=family.pk)
    engine.change_choice(avatar_set=family, change=lambda now: [*now, stored_asset(2).pk])

    engine.rename_set(avatar_set=stale, name="Holiday")

    assert AvatarSet.objects.get().name == "Holiday"
    assert AvatarSet.objects.get().items.count() == 2, "the choice made meanwhile is kept"


def test_it_says_when_another_set_has_the_same_name(signed_in: Client):
    first = engine.create_set(name="Best of Bo", asset_ids=[stored_asset(1).pk])
    other = engine.create_set(name="Holiday", asset_ids=[stored_asset(2).pk])

    made = signed_in.post(
        "/sets/", {"name": "best of bo", "assets": [stored_asset(3).pk]}, follow=True
    )
    asked = signed_in.post(f"/sets/{other.pk}/rename/", {"name": "Best of Bo"})
    other.refresh_from_db()
    assert other.name == "Holiday", "renamed onto another set's name before asking"
    assert asked.status_code == 200
    assert re.search(r"There is already a set named (?i:best of bo)\.", text(asked)), text(asked)
    assert 'name="confirm" value="yes">Rename to Best of Bo anyway</button>' in (
        asked.content.decode()
    )
    renamed = signed_in.post(
        f"/sets/{other.pk}/rename/", {"name": "Best of Bo", "confirm": "yes"}, follow=True
    )
    alone = signed_in.post(f"/sets/{first.pk}/rename/", {"name": "Bo's best"}, follow=True)

    twice = "Another set is also named {}: rename one of them to tell them apart."
    assert twice.format("best of bo") in messages_of(made)
    assert twice.format("Best of Bo") in messages_of(renamed)
    assert not any("Another set" in m for m in messages_of(alone)), messages_of(alone)
    assert AvatarSet.objects.count() == 3, "said, not refused"
