"""Location data stays private: uploads lose GPS and XMP losslessly; thumbnails carry nothing."""

import base64
import io
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image, PngImagePlugin

from studio import engine, metadata, originals, thumbs
from studio.api.auth import issue_token
from studio.models import Asset
from tests.factories import a_batch, drain
from tests.fake_ember import FakeEmber
from tests.studio_pages import served_bytes

pytestmark = pytest.mark.django_db

WHERE = (52.0, 31.0, 12.5)  # a latitude someone would rather keep to themselves
XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
    b'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
    b'xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:GPSLatitude="52,31.2083N"/>'
    b"</rdf:RDF></x:xmpmeta>"
)


def phone_photo(fmt: str) -> bytes:
    """A photo as a phone writes it: orientation, camera, GPS in EXIF and again in XMP."""
    img = Image.new("RGB", (96, 64), (10, 120, 200))
    for x in range(0, 96, 7):
        img.putpixel((x, x % 64), (255, 255, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90
    exif[0x0110] = "Pixel 9"
    exif[0x8825] = {1: "N", 2: WHERE, 3: "E", 4: (13.0, 24.0, 1.0)}
    out = io.BytesIO()
    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_itxt("XML:com.adobe.xmp", XMP.decode())
        img.save(out, fmt, exif=exif, pnginfo=info)
    else:
        img.save(out, fmt, exif=exif, xmp=XMP)
    return out.getvalue()


def upright_photo(fmt: str) -> bytes:
    """A photo whose EXIF holds its orientation alone, as a phone's does once stripped."""
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    Image.new("RGB", (96, 64), (10, 120, 200)).save(out, fmt, exif=exif)
    return out.getvalue()


def gps_of(data: bytes) -> dict:
    with Image.open(io.BytesIO(data)) as img:
        return dict(img.getexif().get_ifd(0x8825))


def pixels_of(data: bytes) -> bytes:
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB").tobytes()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_it_strips_gps_and_xmp_and_keeps_the_pixels_and_the_orientation_alone(fmt):
    """EXIF keeps its orientation (a phone's photo would show on its side) and nothing else:
    a review found places through routes a stripper of GPS directories did not follow."""
    photo = phone_photo(fmt)
    assert gps_of(photo) and b"GPSLatitude" in photo  # the fixture really carries both

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {}
    assert b"GPSLatitude" not in clean
    assert pixels_of(clean) == pixels_of(photo)
    with Image.open(io.BytesIO(clean)) as img:
        assert dict(img.getexif()) == {0x0112: 6}
        img.load()  # still a whole, decodable image


def test_a_jpeg_keeps_its_compressed_scan_byte_for_byte():
    photo = phone_photo("JPEG")

    clean = metadata.strip_location(photo)

    scan = photo.index(b"\xff\xda")
    assert clean.endswith(photo[scan:]), "the entropy-coded data was re-encoded"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_a_photo_with_nothing_to_strip_is_passed_on_without_a_copy(fmt):
    # An upload is up to 25 MB: each copy of it cost a 24-megapixel upload ~25 ms.
    photo = upright_photo(fmt)

    assert metadata.strip_location(photo) is photo, "a photo without location was copied"
    with_location = phone_photo(fmt)
    assert metadata.strip_location(with_location) != with_location


@pytest.mark.parametrize(
    "data", [b"not an image", b"\xff\xd8\xff\xe1\x00", b"\x89PNG\r\n\x1a\n\x00\x00"]
)
def test_it_leaves_broken_bytes_for_the_store_to_refuse(data):
    with pytest.raises(originals.NotAnImage):
        originals.inspect(metadata.strip_location(data))


def test_an_upload_through_the_api_is_stored_without_location(client, make_subject):
    person = User.objects.create_user("ada", password="correct horse battery")
    subject = make_subject("Ada")
    photo = phone_photo("JPEG")

    response = client.post(
        f"/api/v1/subjects/{subject.pk}/references",
        {"file": SimpleUploadedFile("phone.jpg", photo, content_type="image/jpeg")},
        HTTP_AUTHORIZATION=f"Bearer {issue_token(user=person)}",
    )

    assert response.status_code == 201
    asset = Asset.objects.get()
    stored = originals.read(asset.sha256, asset.mime)
    assert gps_of(stored) == {} and b"GPSLatitude" not in stored
    assert asset.sha256 == originals.sha256_of(stored)  # hashed after stripping
    served = client.get(
        f"/api/v1/assets/{asset.pk}/original",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(user=person)}",
    )
    assert served_bytes(served) == stored


def test_the_upload_form_says_location_is_removed(client, make_subject):
    person = User.objects.create_user("ada", password="correct horse battery")
    client.force_login(person)
    subject = make_subject("Ada")

    page = client.get(f"/subjects/{subject.pk}/").content.decode()

    assert "GPS location" in page and "removed" in page


def test_ember_never_receives_the_location(make_subject, ember, worker):
    fake = FakeEmber(ember)
    subject = make_subject("Ada")
    engine.add_reference(subject=subject, data=phone_photo("WEBP"), file_name="phone.webp")
    a_batch(subject)

    drain(worker)

    [body] = fake.submits
    [sent] = body["references"]
    assert gps_of(base64.b64decode(sent["data"])) == {}
    assert b"GPSLatitude" not in base64.b64decode(sent["data"])


def test_a_thumbnail_carries_no_metadata(make_subject):
    subject = make_subject("Ada")
    asset = engine.add_reference(subject=subject, data=phone_photo("JPEG"), file_name="p.jpg")
    # Even an original stored before stripping existed gives a clean thumbnail.
    raw = phone_photo("PNG")

    for data in (originals.read(asset.sha256, asset.mime), raw):
        thumb = thumbs.render(data, 64)
        with Image.open(io.BytesIO(thumb)) as img:
            assert not img.getexif() and "xmp" not in img.info and "exif" not in img.info
        assert b"Exif" not in thumb and b"XMP " not in thumb

    assert Path(settings.AVATARS_DATA_DIR, "originals").is_dir()


@pytest.mark.parametrize(("located", "looks"), [(False, 1), (True, 2)])
def test_an_upload_is_checked_again_only_when_its_location_was_taken_out(
    make_subject, monkeypatch, located, looks
):
    # The bytes the store keeps are always checked; the same bytes need it once (12 ms a
    # 24-megapixel JPEG), stripped ones again.
    real, seen = originals.precheck, []
    monkeypatch.setattr(originals, "precheck", lambda data: seen.append(data) or real(data))
    photo = phone_photo("JPEG") if located else upright_photo("JPEG")

    engine.add_reference(subject=make_subject("Ada"), data=photo, file_name="ada.jpg")

    assert len(seen) == looks, f"the upload's bytes were checked {len(seen)} times"
    stored = Asset.objects.get()
    assert seen[-1] == originals.read(stored.sha256, stored.mime), "the stored bytes went unchecked"
