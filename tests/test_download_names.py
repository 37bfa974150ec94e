"""A reference photo whose name has no ASCII to keep still downloads as a photo of its type."""

import re

import pytest
from django.test import Client

from studio import engine
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db


def uploaded_and_saved_as(client: Client, subject, file_name: str, fmt: str = "PNG") -> str:
    """Upload a reference photo named `file_name`; return the name its download is saved as."""
    photo = engine.add_reference(subject=subject, data=png_bytes(30, fmt=fmt), file_name=file_name)
    response = client.get(f"/assets/{photo.pk}/download/")
    assert response.status_code == 200
    found = re.fullmatch(r'attachment; filename="([^"]*)"', response["Content-Disposition"])
    assert found, response["Content-Disposition"]
    return found[1]


@pytest.mark.parametrize(
    ("file_name", "saved"),
    [
        ("中文.png", "photo.png"),  # found by a review: "png.png"
        (".png", "photo.png"),  # found by a review: "png.png"
        ("中文.PNG", "photo.png"),
        ("Ömer 中文.png", "Omer.png"),
        ("Øberg Łódź Straße.png", "Oberg-Lodz-Strasse.png"),  # a review's: "berg"
        ("中文.jpg", "photo.png"),  # the name of another type: the type it is
        ("中文", "photo.png"),
        ("ada.png", "ada.png"),
        ("ada.v2", "ada.v2.png"),
        ("../../etc/passwd", "etc-passwd.png"),
    ],
)
def test_a_photo_downloads_under_what_survives_of_its_name_or_as_photo(
    signed_in: Client, subject, file_name, saved
):
    assert uploaded_and_saved_as(signed_in, subject, file_name) == saved


@pytest.mark.parametrize(
    ("file_name", "saved"), [("中文.jpeg", "photo.jpeg"), (".jpg", "photo.jpg")]
)
def test_a_jpeg_whose_name_has_nothing_left_keeps_its_own_jpeg_extension(
    signed_in: Client, subject, file_name, saved
):
    assert uploaded_and_saved_as(signed_in, subject, file_name, fmt="JPEG") == saved
