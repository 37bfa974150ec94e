"""The subject pages and their reference photos; long lists, a page at a time."""

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studio.models import Asset, Origin, Subject
from studio.web.refusals import PHOTOS_FORM_EXPIRED
from tests.factories import png_bytes
from tests.studio_pages import link, messages_of, text, walk

pytestmark = pytest.mark.django_db


# --- subjects and reference photos --------------------------------------------------


def test_it_creates_a_subject_and_shows_its_page(signed_in: Client):
    response = signed_in.post("/subjects/", {"name": "Ada Lovelace"}, follow=True)

    subject = Subject.objects.get()
    assert subject.name == "Ada Lovelace"
    assert response.redirect_chain[-1][0] == f"/subjects/{subject.pk}/"
    assert "Ada Lovelace" in text(response)
    assert "No reference photos yet." in text(response)


def test_it_refuses_a_subject_without_a_name(signed_in: Client):
    response = signed_in.post("/subjects/", {"name": "   "})

    assert response.status_code == 400
    assert "This field is required." in text(response)
    assert not Subject.objects.exists()


def test_it_shows_an_uploaded_photo_on_the_subject_page(signed_in: Client, make_subject):
    ada = make_subject("Ada")
    photo = SimpleUploadedFile("ada.png", png_bytes(7), content_type="image/png")

    response = signed_in.post(f"/subjects/{ada.pk}/", {"photo": photo}, follow=True)

    asset = Asset.objects.get()
    assert list(asset.subjects.all()) == [ada]
    assert asset.origin == Origin.UPLOADED
    assert "Added ada.png to Ada's photos." in messages_of(response)
    assert f'src="/assets/{asset.pk}/thumb/256/v3/"' in response.content.decode()
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/").status_code == 200


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("notes.txt", b"just some text\n", "The file is not a PNG, JPEG, WebP or GIF image."),
        ("cut.png", png_bytes(3)[:-40], "The image could not be decoded"),
        (
            "page.png",
            b"<!doctype html><html><script>alert(1)</script></html>",
            "The file is not a PNG, JPEG, WebP or GIF image.",
        ),
        ("empty.png", b"", "The submitted file is empty."),
    ],
)
def test_it_shows_why_an_upload_is_refused_and_stores_nothing(
    signed_in: Client, make_subject, data_dir, name: str, data: bytes, error: str
):
    ada = make_subject("Ada")
    upload = SimpleUploadedFile(name, data, content_type="image/png")

    response = signed_in.post(f"/subjects/{ada.pk}/", {"photo": upload})

    assert response.status_code == 400
    assert error in text(response)
    assert "decoder said" not in text(response), "the image library's words, for a family"
    assert not Asset.objects.exists()
    assert not any((data_dir / "originals").glob("*"))


def test_it_refuses_an_upload_without_a_file(signed_in: Client, make_subject):
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/", {})

    assert response.status_code == 400
    assert "This field is required." in text(response)


def test_one_of_several_photos_refused_is_answered_with_its_reason_alone(
    signed_in: Client, make_subject
):
    """Photos chosen together go one a request (photos.js); a refused one's whole page said,
    and so used up, "Added beach.png…" of the photo before it, which the page then lacked."""
    ada = make_subject("Ada")
    several = {"HTTP_X_AVATARS_PHOTOS": "one of several"}
    beach = SimpleUploadedFile("beach.png", png_bytes(3), content_type="image/png")
    notes = SimpleUploadedFile("notes.png", b"a shopping list", content_type="image/png")

    taken = signed_in.post(f"/subjects/{ada.pk}/", {"photo": beach}, **several)
    refused = signed_in.post(f"/subjects/{ada.pk}/", {"photo": notes}, **several)

    # Not a redirect: that is how a sign-in that ran out answers, which the script must
    # tell apart (a re-review: it counted a signed-out upload as taken).
    assert taken.status_code == 204
    assert refused.status_code == 400
    assert refused["Content-Type"] == "text/plain; charset=utf-8"
    assert refused.content.decode() == "The file is not a PNG, JPEG, WebP or GIF image."
    page = signed_in.get(f"/subjects/{ada.pk}/")
    assert messages_of(page) == ["Added beach.png to Ada's photos."]


def test_one_of_several_photos_refused_for_its_token_is_answered_in_words(make_subject, person):
    """A page left open past its token's life: the reason alone, not the studio's page,
    which would use up what was said of the photos before it."""
    ada = make_subject("Ada")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(person)
    beach = SimpleUploadedFile("beach.png", png_bytes(3), content_type="image/png")

    refused = browser.post(f"/subjects/{ada.pk}/", {"photo": beach}, HTTP_X_AVATARS_PHOTOS="1")

    assert refused.status_code == 403
    assert refused["Content-Type"] == "text/plain; charset=utf-8"
    assert refused.content.decode() == PHOTOS_FORM_EXPIRED


# --- long lists, a page at a time ----------------------------------------------------


def test_it_pages_the_subjects_by_name_each_once(
    signed_in: Client, make_reference, django_assert_max_num_queries
):
    names = ["Ada" if n % 3 == 0 else f"Subject {n:04}" for n in range(120)]
    Subject.objects.bulk_create(Subject(name=name, slug=f"s-{n}") for n, name in enumerate(names))
    by_name = list(Subject.objects.order_by("name", "pk").values_list("pk", flat=True))
    first = Subject.objects.get(pk=by_name[0])
    make_reference(first), make_reference(first)

    seen, pages = walk(
        signed_in, "/subjects/", r'href="/subjects/(\d+)/"', django_assert_max_num_queries
    )

    assert seen == by_name  # each subject once, by name, then by id among equal names
    assert [len(re.findall(r'href="/subjects/\d+/"', p.content.decode())) for p in pages] == [
        50,
        50,
        20,
    ]
    assert "Ada 2 photos" in text(pages[0])
    assert link(pages[0], "Previous") is None and link(pages[-1], "Next") is None
    back = signed_in.get("/subjects/" + (link(pages[1], "Previous") or ""))
    assert re.findall(r'href="/subjects/(\d+)/"', back.content.decode()) == [
        str(pk) for pk in by_name[:50]
    ]


def test_it_pages_a_subjects_reference_photos_newest_first_each_once(
    signed_in: Client, make_subject, django_assert_max_num_queries
):
    ada = make_subject("Ada")
    photos = Asset.objects.bulk_create(
        Asset(
            sha256=f"{n:064x}",
            file_name=f"ada-{n}.png",
            mime="image/png",
            width=64,
            height=48,
            size=100,
            origin=Origin.UPLOADED,
        )
        for n in range(120)
    )
    ada.assets.add(*photos)
    newest_first = list(ada.assets.order_by("-created_at", "-id").values_list("pk", flat=True))

    seen, pages = walk(
        signed_in,
        f"/subjects/{ada.pk}/",
        r'href="/assets/(\d+)/"',  # each photo opens in the viewer
        django_assert_max_num_queries,
    )

    assert seen == newest_first
    assert len(pages) == 3
    assert link(pages[0], "Previous") is None and link(pages[1], "Previous") is not None


@pytest.mark.parametrize("number", ["abc", "0", "-1", "²", "99999999999999999999", "1e3", "9999"])
def test_it_answers_an_odd_or_past_the_end_page_number_without_an_error(
    signed_in: Client, subject, number: str
):
    for url in ("/subjects/", f"/subjects/{subject.pk}/", "/sets/", "/gallery/"):
        response = signed_in.get(url, {"page": number})

        assert response.status_code == 200, url
