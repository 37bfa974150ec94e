"""Subjects with a face, asked about twice, and their photos shared and renamed."""

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studio import curation, engine
from studio.models import Asset, Subject
from tests.factories import png_bytes
from tests.studio_pages import messages_of, part, text

pytestmark = pytest.mark.django_db

# The shared cast of the studio pages: a person, signed in.


def upload(client: Client, subject: Subject, data: bytes, name: str = "ada.png"):
    photo = SimpleUploadedFile(name, data, content_type="image/png")
    return client.post(f"/subjects/{subject.pk}/", {"photo": photo}, follow=True)


# --- faces and names -------------------------------------------------------------------


def test_it_lists_each_subject_with_the_face_of_its_first_photo(
    signed_in: Client, make_subject, make_reference
):
    ada = make_subject("Ada")
    make_subject("Bo")
    first = make_reference(ada)
    make_reference(ada)

    body = signed_in.get("/subjects/").content.decode()

    faces = re.findall(r'<img class="face" src="/assets/(\d+)/thumb/128/v3/"', body)
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

    assert messages_of(shared) == [
        "Added to Bo's photos: it is the same photo already known as “ada.png”."
    ]
    assert bo.assets.count() == 1


def test_it_says_a_photo_another_subject_renamed_is_the_same_photo_by_its_name(
    signed_in: Client, make_subject
):
    """Found by a review: "Added ../../etc/passwd to Cy's photos" for Cy's cy1.png."""
    bo, cy = make_subject("Bo"), make_subject("Cy")
    upload(signed_in, bo, png_bytes(8), name="bo.png")
    photo = bo.assets.get()
    curation.rename_photo(photo=photo, file_name="../../etc/passwd")

    again = upload(signed_in, cy, png_bytes(8), name="cy1.png")

    assert messages_of(again) == [
        "Added to Cy's photos: it is the same photo already known as “../../etc/passwd”."
    ]
    assert list(cy.assets.all()) == [photo]


def test_it_says_on_the_page_that_a_photo_is_shared_and_a_rename_is_for_everyone(
    signed_in: Client, make_subject
):
    bo, cy, di = make_subject("Bo"), make_subject("Cy"), make_subject("Di")
    for person in (bo, cy, di):
        engine.add_reference(subject=person, data=png_bytes(9), file_name=f"{person.slug}.png")
    engine.add_reference(subject=bo, data=png_bytes(10), file_name="alone.png")
    photo = Asset.objects.get(file_name="bo.png")

    page = text(signed_in.get(f"/subjects/{bo.pk}/"))
    signed_in.post(f"/subjects/{bo.pk}/photos/{photo.pk}/rename/", {"name": "Granny.png"})

    assert page.count("Shared with 2 other subjects") == 1  # alone.png is not shared
    assert "The name is the photo's: the other subjects see it too." in page
    assert "Granny.png" in text(signed_in.get(f"/subjects/{cy.pk}/"))
    assert "Granny.png" in text(signed_in.get(f"/subjects/{di.pk}/"))


# --- renaming ----------------------------------------------------------------------------


def test_it_renames_a_subject_and_its_photos_captions(signed_in: Client, make_subject):
    ada = make_subject("Ada")
    engine.add_reference(subject=ada, data=png_bytes(7), file_name="ada.png")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": "Ada L."}, follow=True)

    ada.refresh_from_db()
    assert ada.name == "Ada L."
    assert messages_of(response) == ["Renamed Ada to Ada L."]
    assert "Ada L. · ada.png" in text(signed_in.get("/gallery/"))


def test_it_asks_before_renaming_a_subject_to_a_name_another_has(signed_in: Client, make_subject):
    """Found by a review: Cy renamed to Ada made two entries alike in every list, unasked."""
    ada, cy = make_subject("Ada"), make_subject("Cy")

    asked = signed_in.post(f"/subjects/{cy.pk}/rename/", {"name": " ada "})

    cy.refresh_from_db()
    assert asked.status_code == 200 and cy.name == "Cy"
    assert "There is already a subject named Ada." in text(asked)
    assert f'href="/subjects/{ada.pk}/"' in asked.content.decode()
    assert "Rename to ada anyway" in text(asked)

    done = signed_in.post(
        f"/subjects/{cy.pk}/rename/", {"name": "Ada", "confirm": "yes"}, follow=True
    )

    cy.refresh_from_db()
    assert cy.name == "Ada"
    assert messages_of(done) == ["Renamed Cy to Ada."]


def test_it_renames_a_subject_to_its_own_name_in_other_letters_without_asking(
    signed_in: Client, make_subject
):
    ada = make_subject("ada")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": "Ada"}, follow=True)

    ada.refresh_from_db()
    assert ada.name == "Ada"
    assert messages_of(response) == ["Renamed ada to Ada."]


@pytest.mark.parametrize(
    ("typed", "said"),
    [("   ", "A subject needs a name."), ("A" * 121, "at most 120 characters")],
)
def test_it_shows_a_refused_name_beside_the_rename_field_with_what_was_typed(
    signed_in: Client, make_subject, typed, said
):
    """Found by a review: a refusal redirected, said at the top, and put the old name back."""
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/rename/", {"name": typed})

    ada.refresh_from_db()
    assert ada.name == "Ada"
    assert response.status_code == 400
    assert messages_of(response) == []
    panel = part(response, r'<details class="edit card" open>.*?</details>')
    assert said in panel
    field = re.search(r'<input type="text" name="name" id="rename-subject"[^>]*>', response.text)
    assert field and f'value="{typed}"' in field[0] and 'aria-invalid="true"' in field[0]


def test_it_shows_a_refused_photo_name_beside_that_photos_field(signed_in: Client, subject):
    photo = subject.assets.get()

    response = signed_in.post(f"/subjects/{subject.pk}/photos/{photo.pk}/rename/", {"name": "  "})

    photo.refresh_from_db()
    assert photo.file_name == "ada.png"
    assert response.status_code == 400
    assert messages_of(response) == []
    panel = part(response, r'<details class="edit" open>.*?</details>')
    assert "A photo needs a file name." in panel
    assert f'id="rename-{photo.pk}" value="  "' in response.text


def test_it_renames_a_photo(signed_in: Client, subject):
    photo = subject.assets.get()

    response = signed_in.post(
        f"/subjects/{subject.pk}/photos/{photo.pk}/rename/", {"name": "ada-garden.png"}, follow=True
    )

    photo.refresh_from_db()
    assert photo.file_name == "ada-garden.png"
    assert messages_of(response) == ["Renamed ada.png to ada-garden.png."]


def test_it_links_a_small_svg_favicon_from_every_page(signed_in: Client):
    body = signed_in.get("/subjects/").content.decode()

    assert '<link rel="icon" href="/static/studio/favicon.svg" type="image/svg+xml">' in body


def test_the_upload_says_both_limits_a_photo_is_held_to(signed_in: Client, subject):
    """Found by a review: an 8000 x 8000 photo was refused by a limit the page never named."""
    page = signed_in.get(f"/subjects/{subject.pk}/")

    assert "up to 25 MB and 40 megapixels" in text(page)


def test_an_upload_cut_off_in_its_photo_says_so_not_that_a_photo_is_required(
    signed_in: Client, make_subject
):
    """Found by a review over uvicorn: a body cut off before its closing boundary (the
    photo's bytes sent, its end never) said "This field is required."."""
    ada = make_subject("Ada")
    photo = png_bytes(5) + b"\0" * 8192
    body = (
        b'--cut\r\nContent-Disposition: form-data; name="photo"; filename="ada.png"\r\n'
        b"Content-Type: image/png\r\n\r\n" + photo  # no closing boundary
    )

    response = signed_in.post(
        f"/subjects/{ada.pk}/", body, content_type="multipart/form-data; boundary=cut"
    )

    assert response.status_code == 400
    assert "The photo did not arrive whole, so nothing was uploaded." in text(response)
    assert "This field is required" not in text(response)
    assert not Asset.objects.filter(subjects=ada).exists()


def test_a_form_sent_without_choosing_a_photo_still_asks_for_one(signed_in: Client, make_subject):
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/", {"photo": ""})

    assert response.status_code == 400
    assert "This field is required." in text(response)
    assert "did not arrive whole" not in text(response)
