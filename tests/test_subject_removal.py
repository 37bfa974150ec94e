"""Removing subjects and their photos: asked first, never losing what anything else needs.

A photo is taken off a subject whenever another subject, a batch's frozen references or
a set still needs it; only a photo nothing needs is deleted, its original with it. A
subject a batch was made of stays (docs/design.md §12).
"""

import pytest
from django.test import Client

from studio import curation, engine, originals, thumbs
from studio.engine import planning
from studio.models import Asset, Origin, Subject, Task
from tests.factories import batch_request, png_bytes
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db

CONFIRM = {"confirm": "yes"}


def original_of(asset: Asset):
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


def frozen() -> list[tuple[object, int, list]]:
    """What batches froze: each task's references and version, read again from the database."""
    return [(t.pk, t.version, t.references) for t in Task.objects.order_by("pk")]


def shared_photo(make_subject) -> tuple[Subject, Subject, Asset]:
    """Bo's photo, frozen by Bo's batch, uploaded again (same bytes) for Cy."""
    bo, cy = make_subject("Bo"), make_subject("Cy")
    photo = engine.add_reference(subject=bo, data=png_bytes(11), file_name="granny.png")
    engine.generate(request=batch_request(bo, title="Bo's spring"))
    engine.add_reference(subject=cy, data=png_bytes(11), file_name="cy1.png")
    return bo, cy, photo


# --- asked first -----------------------------------------------------------------------


def test_it_asks_before_removing_a_subject_and_the_first_post_removes_nothing(
    signed_in: Client, subject
):
    photo = subject.assets.get()

    asked = signed_in.post(f"/subjects/{subject.pk}/remove/")

    assert asked.status_code == 200
    said = text(asked)
    assert "Remove Ada and their 1 photo?" in said
    assert "This cannot be undone." in said
    assert 'name="confirm" value="yes"' in asked.text
    assert f'href="/subjects/{subject.pk}/">Keep Ada</a>' in asked.text
    assert Subject.objects.filter(pk=subject.pk).exists()
    assert Asset.objects.filter(pk=photo.pk).exists() and original_of(photo).is_file()


def test_it_asks_before_removing_a_photo_and_the_first_post_removes_nothing(
    signed_in: Client, subject
):
    photo = subject.assets.get()

    asked = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/")

    assert asked.status_code == 200
    said = text(asked)
    assert "Remove ada.png?" in said
    assert "it is deleted from Avatars, original and all. This cannot be undone." in said
    assert 'name="confirm" value="yes"' in asked.text
    assert list(photo.subjects.all()) == [subject]
    assert original_of(photo).is_file()


def test_it_says_who_keeps_a_photo_when_asking_to_take_it_off_a_subject(
    signed_in: Client, make_subject
):
    _bo, cy, photo = shared_photo(make_subject)
    engine.create_set(name="Family", asset_ids=[photo.pk])

    said = text(signed_in.post(f"/subjects/{cy.pk}/photos/{photo.pk}/remove/"))

    assert "Remove granny.png from Cy's photos?" in said
    assert (
        "It is only taken off Cy's photos: the photo stays in Avatars, as it is, because Bo "
        "still has it and the batch “Bo's spring” and the set “Family” use it."
    ) in said
    assert list(photo.subjects.order_by("name").values_list("name", flat=True)) == ["Bo", "Cy"]


def test_it_says_what_stays_when_asking_about_a_subject_with_shared_photos(
    signed_in: Client, make_subject
):
    _bo, cy, _photo = shared_photo(make_subject)
    engine.add_reference(subject=cy, data=png_bytes(12), file_name="cy2.png")

    said = text(signed_in.post(f"/subjects/{cy.pk}/remove/"))

    assert "Remove Cy and their 1 photo?" in said
    assert "1 shared photo stays in Avatars for the other subjects, batches or sets" in said


def test_it_says_a_subject_a_batch_was_made_of_cannot_be_removed_when_asked(
    signed_in: Client, subject
):
    engine.generate(request=batch_request(subject))

    asked = signed_in.post(f"/subjects/{subject.pk}/remove/")

    assert "Ada cannot be removed: the batch “Spring avatars” uses Ada." in text(asked)
    assert 'name="confirm"' not in asked.text


# --- photos ------------------------------------------------------------------------------


def test_it_removes_an_unused_photo_with_its_original_and_thumbnails(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    signed_in.get(f"/assets/{photo.pk}/thumb/128/v3/")
    assert original_of(photo).is_file() and thumbs.path_for(photo.sha256, 128).is_file()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(
            f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", CONFIRM, follow=True
        )

    assert messages_of(response) == ["Removed ada.png."]
    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert not original_of(photo).exists()
    assert not thumbs.path_for(photo.sha256, 128).exists()


def test_it_takes_a_photo_a_batch_froze_off_its_subject_and_changes_no_batch(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    """Found by a review: a frozen photo could not be taken off a subject at all."""
    photo = subject.assets.get()
    engine.generate(request=batch_request(subject))
    before = frozen()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(
            f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", CONFIRM, follow=True
        )

    assert messages_of(response) == [
        "Removed ada.png from Ada's photos; the batch “Spring avatars” still uses it."
    ]
    assert not subject.assets.exists()
    assert Asset.objects.filter(pk=photo.pk).exists()
    assert original_of(photo).is_file()
    assert frozen() == before
    viewer = text(signed_in.get(f"/assets/{photo.pk}/"))
    assert "No subject has this photo now; it is kept for the batches and sets" in viewer


def test_it_takes_a_photo_a_set_holds_off_its_subject_and_keeps_it(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    engine.create_set(name="Family", asset_ids=[photo.pk])

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(
            f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", CONFIRM, follow=True
        )

    assert messages_of(response) == [
        "Removed ada.png from Ada's photos; the set “Family” still uses it."
    ]
    assert not subject.assets.exists()
    assert original_of(photo).is_file()


def test_it_takes_a_shared_photo_off_one_subject_and_keeps_it_for_the_other(
    signed_in: Client, subject, make_subject
):
    photo = subject.assets.get()
    bo = make_subject("Bo")
    photo.subjects.add(bo)

    response = signed_in.post(
        f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", CONFIRM, follow=True
    )

    assert messages_of(response) == ["Removed ada.png from Ada's photos; Bo still has it."]
    assert list(photo.subjects.all()) == [bo]
    assert original_of(photo).is_file()


def test_it_takes_a_frozen_photo_off_the_wrong_subject_and_leaves_it_with_the_right_one(
    signed_in: Client, make_subject
):
    """Found by a review: "Granny in the garden cannot be removed: … uses it" on Cy's page."""
    bo, cy, photo = shared_photo(make_subject)
    before = frozen()

    response = signed_in.post(f"/subjects/{cy.pk}/photos/{photo.pk}/remove/", CONFIRM, follow=True)

    assert messages_of(response) == [
        "Removed granny.png from Cy's photos; Bo still has it "
        "and the batch “Bo's spring” still uses it."
    ]
    assert list(photo.subjects.all()) == [bo]
    assert frozen() == before


def test_it_keeps_the_file_a_result_shares_when_removing_a_photo(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    Asset.objects.create_stored(
        originals.save(originals.read(photo.sha256, photo.mime)),
        file_name="same-bytes.png",
        origin=Origin.GENERATED,
    )

    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", CONFIRM)

    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert original_of(photo).is_file()


# --- subjects ----------------------------------------------------------------------------


def test_it_says_a_subject_without_photos_was_removed_without_counting_none(
    signed_in: Client, make_subject
):
    """A review read "Removed Dora and 0 photos." """
    dora = make_subject("Dora")

    response = signed_in.post(f"/subjects/{dora.pk}/remove/", CONFIRM, follow=True)

    assert messages_of(response) == ["Removed Dora."]
    assert not Subject.objects.filter(pk=dora.pk).exists()


def test_it_removes_a_subject_with_its_unused_photos(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/subjects/{subject.pk}/remove/", CONFIRM, follow=True)

    assert messages_of(response) == ["Removed Ada and 1 photo."]
    assert response.redirect_chain[-1][0] == "/subjects/"
    assert not Subject.objects.exists()
    assert not Asset.objects.exists()
    assert not original_of(photo).exists()


def test_it_removes_a_subject_never_in_a_batch_detaching_a_photo_a_batch_froze(
    signed_in: Client, make_subject, django_capture_on_commit_callbacks
):
    """Found by a review: Cy could not be removed although Cy was never in a batch."""
    bo, cy, photo = shared_photo(make_subject)
    own = engine.add_reference(subject=cy, data=png_bytes(12), file_name="cy2.png")
    before = frozen()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/subjects/{cy.pk}/remove/", CONFIRM, follow=True)

    assert messages_of(response) == [
        "Removed Cy and 1 photo. 1 shared photo stays for the others that use it."
    ]
    assert not Subject.objects.filter(pk=cy.pk).exists()
    assert list(photo.subjects.all()) == [bo] and original_of(photo).is_file()
    assert not Asset.objects.filter(pk=own.pk).exists() and not original_of(own).exists()
    assert frozen() == before


def test_it_keeps_the_photos_a_set_holds_when_removing_their_only_subject(
    signed_in: Client, subject
):
    photo = subject.assets.get()
    engine.create_set(name="Family", asset_ids=[photo.pk])

    signed_in.post(f"/subjects/{subject.pk}/remove/", CONFIRM)

    assert not Subject.objects.exists()
    assert Asset.objects.filter(pk=photo.pk).exists() and original_of(photo).is_file()


def test_it_refuses_to_remove_a_subject_a_batch_was_made_of(signed_in: Client, subject):
    engine.generate(request=batch_request(subject))

    response = signed_in.post(f"/subjects/{subject.pk}/remove/", CONFIRM, follow=True)

    assert messages_of(response) == ["Ada cannot be removed: the batch “Spring avatars” uses Ada."]
    assert Subject.objects.filter(pk=subject.pk).exists()
    assert response.redirect_chain[-1][0] == f"/subjects/{subject.pk}/"


def test_it_says_use_when_several_batches_were_made_of_a_subject(subject):
    """Found by a review: "the batch … and 5 more uses"."""
    for n in range(5):
        engine.generate(request=batch_request(subject, title=f"B{n}"))

    with pytest.raises(curation.InUse) as refused:
        curation.remove_subject(subject=subject)

    assert str(refused.value) == (
        "Ada cannot be removed: the batch “B0”, the batch “B1”, the batch “B2” and 2 more use Ada."
    )


def test_it_finds_a_subject_among_a_tasks_subjects_by_its_whole_id(subject, make_subject):
    bo = make_subject("Bo")
    engine.add_reference(subject=bo, data=png_bytes(13), file_name="bo.png")
    engine.generate(request=batch_request(bo))
    pk = subject.pk
    # Ids whose digits hold Ada's: "[10, 11]" for Ada's 1 is not a batch of Ada.
    Task.objects.update(subjects=[pk * 10, int(f"{pk}{pk}")])

    assert not curation.plan_subject_removal(subject=subject).batches

    Task.objects.update(subjects=[pk * 10, pk])

    assert curation.plan_subject_removal(subject=subject).batches


# --- the engine on its own ---------------------------------------------------------------


def test_the_engine_deletes_only_what_nothing_needs(make_subject):
    bo, cy, shared = shared_photo(make_subject)
    alone = engine.add_reference(subject=cy, data=png_bytes(12), file_name="cy2.png")
    held = engine.add_reference(subject=cy, data=png_bytes(14), file_name="cy3.png")
    engine.create_set(name="Family", asset_ids=[held.pk])

    removal = curation.remove_subject(subject=cy)

    assert [p.pk for p in removal.deleted] == [alone.pk]
    assert {p.pk for p in removal.kept} == {shared.pk, held.pk}
    assert set(Asset.objects.values_list("pk", flat=True)) == {shared.pk, held.pk}
    assert list(shared.subjects.all()) == [bo] and not held.subjects.exists()


def test_the_engine_detaches_a_frozen_photo_from_its_only_subject(subject):
    photo = subject.assets.get()
    engine.generate(request=batch_request(subject))

    removal = curation.remove_photo(photo=photo, subject=subject)

    assert not removal.deletes
    assert str(removal.users) == "the batch “Spring avatars”"
    assert Asset.objects.filter(pk=photo.pk).exists() and not photo.subjects.exists()


def test_a_photo_detached_and_uploaded_again_is_the_same_photo(subject):
    photo = subject.assets.get()
    engine.generate(request=batch_request(subject))
    curation.remove_photo(photo=photo, subject=subject)

    again = engine.add_reference(
        subject=subject, data=originals.read(photo.sha256, photo.mime), file_name="new.png"
    )

    assert again.pk == photo.pk and again.file_name == "ada.png"
    assert list(again.subjects.all()) == [subject]


@pytest.mark.parametrize("in_a_set", [False, True])
def test_a_batch_planned_while_its_photo_is_removed_is_refused_not_accepted(
    subject, monkeypatch, in_a_set
):
    """Found by a review: the API answered 202 for a batch whose photo was deleted between
    reading its references and planning, and its tasks then failed. A photo a set holds is
    only taken off its subject, and kept for the set: the plan is refused all the same."""
    photo = subject.assets.get()
    if in_a_set:
        engine.create_set(name="Family", asset_ids=[photo.pk])
    read = planning.validate

    def a_person_removes_the_photo_meanwhile(request):
        plan = read(request)
        curation.remove_photo(photo=photo, subject=subject)
        return plan

    monkeypatch.setattr(planning, "validate", a_person_removes_the_photo_meanwhile)

    with pytest.raises(engine.InvalidRequest) as refused:
        engine.generate(request=batch_request(subject))

    assert "ada.png was removed while this batch was planned; nothing was planned." in str(
        refused.value
    )
    assert not Task.objects.exists()
    assert Asset.objects.filter(pk=photo.pk).exists() == in_a_set
