"""Subjects with a face, asked about twice, renamed and removed without losing a used photo."""

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studio import engine, originals, thumbs
from studio.models import Asset, AvatarSet, Origin, Subject
from tests.factories import batch_request, png_bytes
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db

# The shared cast of the studio pages: a person, signed in.


def upload(client: Client, subject: Subject, data: bytes, name: str = "ada.png"):
    photo = SimpleUploadedFile(name, data, content_type="image/png")
    return client.post(f"/subjects/{subject.pk}/", {"photo": photo}, follow=True)


def original_of(asset: Asset):
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


# --- faces and names -------------------------------------------------------------------


def test_it_lists_each_subject_with_the_face_of_its_first_photo(
    signed_in: Client, make_subject, make_reference
):
    ada = make_subject("Ada")
    make_subject("Bo")
    first = make_reference(ada)
    make_reference(ada)

    body = signed_in.get("/subjects/").content.decode()

    faces = re.findall(r'<img class="face" src="/assets/(\d+)/thumb/128/"', body)
    assert faces == [str(first.pk)]
    assert body.count('class="face face-none"') == 1  # Bo has no photo yet
    assert "Bo 0 photos" in text(signed_in.get("/subjects/"))


def test_it_asks_before_adding_a_subject_whose_name_is_taken(signed_in: Client, make_subject):
    ada = make_subject("Ada")

    asked = signed_in.post("/subjects/", {"name": " ada "})

    assert asked.status_code == 200
    assert Subject.objects.count() == 1
    assert "There is already a subject named Ada." in text(asked)
    body = asked.content.decode()
    assert f'href="/subjects/{ada.pk}/"' in body
    assert 'name="confirm" value="yes"' in body

    confirmed = signed_in.post("/subjects/", {"name": "ada", "confirm": "yes"}, follow=True)

    assert Subject.objects.count() == 2
    assert confirmed.redirect_chain[-1][0] != f"/subjects/{ada.pk}/"


def test_it_says_a_photo_uploaded_twice_is_already_there(signed_in: Client, make_subject):
    ada = make_subject("Ada")
    upload(signed_in, ada, png_bytes(5))

    again = upload(signed_in, ada, png_bytes(5), name="same-again.png")

    assert messages_of(again) == ["This photo is already there."]
    assert ada.assets.count() == 1


def test_it_adds_a_photo_another_subject_has_without_calling_it_a_repeat(
    signed_in: Client, make_subject
):
    ada, bo = make_subject("Ada"), make_subject("Bo")
    upload(signed_in, ada, png_bytes(6))

    shared = upload(signed_in, bo, png_bytes(6), name="both.png")

    assert messages_of(shared) == ["Added ada.png to Bo's photos."]
    assert bo.assets.count() == 1


# --- renaming ----------------------------------------------------------------------------


def test_it_renames_a_subject_and_its_photos_captions(signed_in: Client, make_subject):
    ada = make_subject("Ada")
    engine.add_reference(subject=ada, data=png_bytes(7), file_name="ada.png")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": "Ada L."}, follow=True)

    ada.refresh_from_db()
    assert ada.name == "Ada L."
    assert messages_of(response) == ["Renamed Ada to Ada L."]
    assert "Ada L. · ada.png" in text(signed_in.get("/gallery/"))


def test_it_refuses_an_empty_name_when_renaming(signed_in: Client, make_subject):
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": "  "}, follow=True)

    ada.refresh_from_db()
    assert ada.name == "Ada"
    assert messages_of(response) == ["A subject needs a name."]


def test_it_renames_a_photo(signed_in: Client, subject):
    photo = subject.assets.get()

    response = signed_in.post(
        f"/subjects/{subject.pk}/photos/{photo.pk}/rename/", {"name": "ada-garden.png"}, follow=True
    )

    photo.refresh_from_db()
    assert photo.file_name == "ada-garden.png"
    assert messages_of(response) == ["Renamed ada.png to ada-garden.png."]


# --- removing ----------------------------------------------------------------------------


def test_it_removes_an_unused_photo_with_its_original_and_thumbnails(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()
    signed_in.get(f"/assets/{photo.pk}/thumb/128/")
    assert original_of(photo).is_file() and thumbs.path_for(photo.sha256, 128).is_file()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", follow=True)

    assert messages_of(response) == ["Removed ada.png."]
    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert not original_of(photo).exists()
    assert not thumbs.path_for(photo.sha256, 128).exists()


def test_it_refuses_to_remove_a_photo_a_batch_froze_and_keeps_the_original(
    signed_in: Client, subject
):
    photo = subject.assets.get()
    engine.generate(request=batch_request(subject))

    response = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", follow=True)

    assert messages_of(response) == [
        "ada.png cannot be removed: the batch “Spring avatars” uses it."
    ]
    assert Asset.objects.filter(pk=photo.pk).exists()
    assert original_of(photo).is_file()


def test_it_refuses_to_remove_a_photo_a_set_holds(signed_in: Client, subject):
    photo = subject.assets.get()
    engine.create_set(name="Family", asset_ids=[photo.pk])

    response = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", follow=True)

    assert messages_of(response) == ["ada.png cannot be removed: the set “Family” uses it."]
    assert original_of(photo).is_file()


def test_it_takes_a_shared_photo_off_one_subject_and_keeps_it_for_the_other(
    signed_in: Client, subject, make_subject
):
    photo = subject.assets.get()
    bo = make_subject("Bo")
    photo.subjects.add(bo)

    response = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/", follow=True)

    assert messages_of(response) == ["Removed ada.png from Ada's photos; Bo still has it."]
    assert list(photo.subjects.all()) == [bo]
    assert original_of(photo).is_file()


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
        signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/remove/")

    assert not Asset.objects.filter(pk=photo.pk).exists()
    assert original_of(photo).is_file()


def test_it_refuses_to_remove_a_subject_whose_photos_are_used(signed_in: Client, subject):
    engine.generate(request=batch_request(subject))
    AvatarSet.objects.create(name="Unrelated")

    response = signed_in.post(f"/subjects/{subject.pk}/remove/", follow=True)

    assert messages_of(response) == [
        "Ada cannot be removed: the batch “Spring avatars” uses ada.png."
    ]
    assert Subject.objects.filter(pk=subject.pk).exists()
    assert response.redirect_chain[-1][0] == f"/subjects/{subject.pk}/"


def test_it_removes_a_subject_with_its_unused_photos(
    signed_in: Client, subject, django_capture_on_commit_callbacks
):
    photo = subject.assets.get()

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/subjects/{subject.pk}/remove/", follow=True)

    assert messages_of(response) == ["Removed Ada and 1 photo."]
    assert response.redirect_chain[-1][0] == "/subjects/"
    assert not Subject.objects.exists()
    assert not Asset.objects.exists()
    assert not original_of(photo).exists()


def test_it_links_a_small_svg_favicon_from_every_page(signed_in: Client):
    body = signed_in.get("/subjects/").content.decode()

    assert '<link rel="icon" href="/static/studio/favicon.svg" type="image/svg+xml">' in body
