"""A photo taken off every subject is kept only for what used it: never sent again, and
deleted once the last set lets go of it (the removal a person asked for, finished)."""

import pytest
from django.test import Client

from studio import curation, engine, originals
from studio.models import Asset, Subject, Task
from tests.factories import batch_request, png_bytes
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db


def original_of(asset: Asset):
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


def removed_but_in_a_set(subject: Subject) -> tuple[Asset, object]:
    """The subject's photo, in a set, then removed from the subject (kept for the set)."""
    photo = subject.assets.get()
    family = engine.create_set(name="Family", asset_ids=[photo.pk])
    curation.remove_photo(photo=photo, subject=subject)
    assert Asset.objects.filter(pk=photo.pk).exists() and not photo.subjects.exists()
    return photo, family


def test_a_set_letting_go_of_a_removed_photo_deletes_it_with_its_original(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    """Found by a review: such a photo stayed for ever, in the gallery and the API, and no
    page could remove it any more."""
    photo, family = removed_but_in_a_set(subject)
    remove = {"action": "remove", "asset": photo.pk}

    # Asked first (a review: the set page's Remove deleted it unasked), and nothing changes.
    asked = signed_in.post(f"/sets/{family.pk}/", remove)
    assert asked.status_code == 200
    assert "it is deleted from Avatars, original and all." in text(asked)
    assert list(family.items.values_list("asset_id", flat=True)) == [photo.pk]
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/sets/{family.pk}/", {**remove, "confirm": "yes"}, follow=True)

    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert not original_of(photo).exists()
    assert (
        "Deleted the photo ada.png: it was removed from its subjects earlier, "
        "and nothing uses it any more."
    ) in messages_of(response)


def test_a_removed_photo_another_set_or_a_batch_still_uses_stays(
    signed_in: Client, subject, make_subject, django_capture_on_commit_callbacks
):
    photo, family = removed_but_in_a_set(subject)
    engine.create_set(name="Cousins", asset_ids=[photo.pk])

    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(f"/sets/{family.pk}/", {"action": "remove", "asset": photo.pk})

    assert Asset.objects.filter(pk=photo.pk).exists() and original_of(photo).is_file()
    assert not family.items.exists()


def test_a_photo_a_subject_still_has_stays_when_a_set_lets_go(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    family = engine.create_set(name="Family", asset_ids=[photo.pk])

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(
            f"/sets/{family.pk}/", {"action": "remove", "asset": photo.pk}, follow=True
        )

    assert list(subject.assets.all()) == [photo] and original_of(photo).is_file()
    assert messages_of(response) == ["Removed image 1 from Family."]  # not asked, not deleted


def test_a_removed_photo_a_batch_froze_stays_when_the_set_lets_go(subject):
    photo = subject.assets.get()
    engine.generate(request=batch_request(subject))
    family = engine.create_set(name="Family", asset_ids=[photo.pk])
    curation.remove_photo(photo=photo, subject=subject)

    before, after = engine.change_choice(avatar_set=family, change=lambda _chosen: [])

    assert (before, after) == ([photo.pk], [])
    assert curation.let_go(before) == []
    assert Asset.objects.filter(pk=photo.pk).exists()


def test_a_removed_photo_is_refused_as_a_reference_of_a_new_batch(subject, make_subject):
    photo, _family = removed_but_in_a_set(subject)
    bo = make_subject("Bo")
    engine.add_reference(subject=bo, data=png_bytes(7), file_name="bo.png")

    with pytest.raises(engine.InvalidRequest, match="was removed from its subjects"):
        engine.generate(request=batch_request(bo, references=[photo.pk]))
    assert not Task.objects.exists()
