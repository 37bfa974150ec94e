"""A corpus of bad uploads: each gets a clear 400 and nothing is stored (hardening).

Every file goes through both doors, the JSON API and the studio page, which share
the originals store's checks.
"""

import io
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from PIL import Image

from studio.api.auth import issue_token
from studio.models import Asset
from tests.conftest import png_bytes

pytestmark = pytest.mark.django_db


def encoded(img: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **kwargs)
    return out.getvalue()


def corpus() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, the words the refusal must contain)."""
    png = png_bytes(3, size=(120, 90))
    jpeg = encoded(Image.new("RGB", (120, 90), (200, 10, 10)), "JPEG")
    return {
        "text file": (b"just some notes\n" * 20, "not a PNG, JPEG, WebP or GIF"),
        "empty file": (b"", "empty"),
        "truncated PNG": (png[: len(png) // 2], "could not be decoded"),
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "could not be decoded"),
        "HTML named .png": (b"<html><script>alert(1)</script></html>", "not a PNG"),
        "SVG named .png": (
            b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
            "not a PNG",
        ),
        "PNG signature then HTML": (b"\x89PNG\r\n\x1a\n<html></html>", "not a PNG"),
        # 40,000 x 40,000 one-bit pixels: a few hundred KB that would decode to 1.6 GB.
        "decompression bomb": (encoded(Image.new("1", (40_000, 40_000)), "PNG"), "too many pixels"),
        "absurd dimensions": (
            encoded(Image.new("L", (100_000, 1)), "PNG"),
            "no side may be longer",
        ),
        "BMP (not allowed)": (encoded(Image.new("RGB", (10, 10)), "BMP"), "not a PNG"),
    }


CASES = corpus()


@pytest.fixture
def person(db) -> User:
    return User.objects.create_user("ada", password="correct horse battery")


def stored() -> tuple[int, set[str]]:
    folder = Path(settings.AVATARS_DATA_DIR) / "originals"
    files = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    return Asset.objects.count(), files


@pytest.mark.parametrize("name", list(CASES))
def test_the_api_refuses_a_bad_upload_clearly_and_stores_nothing(
    client, person, make_subject, name
):
    data, words = CASES[name]
    subject = make_subject("Ada")
    token = issue_token(user=person)
    before = stored()

    response = client.post(
        f"/api/v1/subjects/{subject.pk}/references",
        {"file": SimpleUploadedFile("photo.png", data, content_type="image/png")},
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 400
    assert words in response.json()["error"]["message"]
    assert stored() == before


@pytest.mark.parametrize("name", list(CASES))
def test_the_studio_refuses_a_bad_upload_clearly_and_stores_nothing(
    client: Client, person, make_subject, name
):
    data, words = CASES[name]
    subject = make_subject("Ada")
    client.force_login(person)
    before = stored()

    response = client.post(
        reverse("studio:subject", args=[subject.pk]),
        {"photo": SimpleUploadedFile("photo.png", data, content_type="image/png")},
    )

    assert response.status_code == 400
    assert words in response.content.decode()
    assert stored() == before


def test_an_oversize_body_is_refused_by_both_doors(client, person, make_subject, settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 10_000
    subject = make_subject("Ada")
    token = issue_token(user=person)
    client.force_login(person)
    big = png_bytes(4, size=(300, 300)) + b"\0" * 20_000
    before = stored()

    api = client.post(
        f"/api/v1/subjects/{subject.pk}/references",
        {"file": SimpleUploadedFile("big.png", big)},
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    page = client.post(
        reverse("studio:subject", args=[subject.pk]), {"photo": SimpleUploadedFile("big.png", big)}
    )

    assert api.status_code == 400 and "too large" in api.json()["error"]["message"]
    assert page.status_code == 400 and "too large" in page.content.decode()
    assert stored() == before
