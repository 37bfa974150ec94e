"""The gallery from thumbnails, and the originals and thumbnails the pages serve."""

import io
import re
from typing import Any

import pytest
from django.test import Client
from PIL import Image

from studio import originals, thumbs
from studio.models import Origin
from tests.factories import a_batch, png_bytes, stored_asset
from tests.studio_pages import served_bytes, text

pytestmark = pytest.mark.django_db


# --- gallery --------------------------------------------------------------------------


def test_it_shows_the_gallery_from_thumbnails_without_reading_originals(
    signed_in: Client, monkeypatch, django_assert_max_num_queries
):
    assets = [stored_asset(seed) for seed in range(80)]

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the gallery read an original")

    monkeypatch.setattr(originals, "read", refuse)
    # Session, user, the filters' subjects and batches, one page of assets, their subjects.
    with django_assert_max_num_queries(6):
        first = signed_in.get("/gallery/")
    with django_assert_max_num_queries(6):
        second = signed_in.get("/gallery/?page=2")

    body = first.content.decode()
    assert body.count('loading="lazy"') == 60
    assert f'src="/assets/{assets[-1].pk}/thumb/256/v3/"' in body
    assert not re.search(r"<img[^>]+/original/", body)
    assert second.content.decode().count('loading="lazy"') == 20
    assert "Page 2" in text(second) and "Older" not in text(second)


def test_it_keeps_the_gallery_queries_constant_as_assets_grow(
    signed_in: Client, subject, django_assert_num_queries
):
    batches = [a_batch(subject, candidates=1) for _ in range(3)]
    for seed in range(3):
        stored_asset(seed, batch=batches[seed])
    # Session, user, the filters' subjects and batches, one page of assets with their
    # batches, and those assets' subjects: no COUNT over every asset.
    with django_assert_num_queries(6):
        few = signed_in.get("/gallery/")
    for seed in range(3, 50):
        stored_asset(seed, batch=batches[seed % 3])
    with django_assert_num_queries(6):
        many = signed_in.get("/gallery/")

    assert text(few).count("· Spring avatars") == 3
    assert text(many).count("· Spring avatars") == 50


def test_it_marks_generated_images_whose_history_is_missing_in_the_gallery(signed_in: Client):
    stored_asset(1, history_id="", label="Lost history")
    stored_asset(2, label="Fine")

    page = text(signed_in.get("/gallery/?origin=generated"))

    assert "Lost history history missing" in page
    assert "Fine history missing" not in page


# --- images ---------------------------------------------------------------------------


def test_it_serves_an_original_with_its_type_and_immutable_caching(signed_in: Client):
    data = png_bytes(11)
    asset = stored_asset(data=data, origin=Origin.UPLOADED)

    response = signed_in.get(f"/assets/{asset.pk}/original/")

    assert response.status_code == 200
    assert served_bytes(response) == data
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{asset.sha256}"'

    again = signed_in.get(f"/assets/{asset.pk}/original/", HTTP_IF_NONE_MATCH=f'"{asset.sha256}"')
    assert again.status_code == 304
    held = signed_in.get(f"/assets/{asset.pk}/original/", HTTP_IF_NONE_MATCH="*")
    assert held.status_code == 304


def test_it_answers_503_when_a_stored_original_fails_its_checksum(signed_in: Client):
    asset = stored_asset(12)
    path = originals.path_for(asset.sha256, ".png")
    path.write_bytes(png_bytes(13))

    response = signed_in.get(f"/assets/{asset.pk}/original/")

    assert response.status_code == 503
    assert response.content.decode() == "Stored original failed its checksum."


NAVIGATION = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # Chromium's


@pytest.mark.parametrize("route", ["original", "download"])
def test_a_person_who_opens_a_missing_original_gets_a_page_back_to_its_image(
    signed_in: Client, route: str
):
    """Found by a review: a bare text 503, with no way back into the studio."""
    asset = stored_asset(16)
    originals.path_for(asset.sha256, ".png").unlink()

    opened = signed_in.get(f"/assets/{asset.pk}/{route}/", HTTP_ACCEPT=NAVIGATION)
    fetched = signed_in.get(f"/assets/{asset.pk}/{route}/", HTTP_ACCEPT="image/webp,*/*")

    assert opened.status_code == 503
    assert opened["Content-Type"].startswith("text/html")
    assert "The original is not in the store. Nothing was sent." in text(opened)
    assert f'href="/assets/{asset.pk}/"' in opened.content.decode()
    assert "Content-Disposition" not in opened
    assert fetched.status_code == 503  # an <img> or a program: the sentence alone
    assert fetched.content.decode() == "The original is not in the store."


def test_it_serves_a_thumbnail_as_webp_with_immutable_caching(signed_in: Client):
    asset = stored_asset(14)

    response = signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/webp"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{asset.sha256}-256-v3"'
    with Image.open(io.BytesIO(response.content)) as img:
        assert img.format == "WEBP"
        assert max(img.size) <= 256


def test_it_serves_a_cached_thumbnail_without_opening_the_original(signed_in: Client, monkeypatch):
    asset = stored_asset(15)
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/").status_code == 200

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the original was read for a cached thumbnail")

    monkeypatch.setattr(originals, "read", refuse)
    response = signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/")

    assert response.status_code == 200
    assert response.content == thumbs.path_for(asset.sha256, 256).read_bytes()


def test_a_thumbnail_the_disk_will_not_keep_is_shown_all_the_same(signed_in: Client, monkeypatch):
    """Found by a review: on a full disk every thumbnail not yet cached answered 500, and
    the gallery and batch pages showed broken images."""
    asset = stored_asset(17)
    real = originals.write_atomically

    def full(path, data: bytes) -> None:
        if path.parent == thumbs.thumbs_dir():
            raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(originals, "write_atomically", full)
    response = signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/")

    assert response.status_code == 200
    with Image.open(io.BytesIO(response.content)) as img:
        assert img.format == "WEBP" and max(img.size) <= 256
    assert not thumbs.path_for(asset.sha256, 256).exists()


def test_it_rebuilds_a_thumbnail_whose_cache_file_was_deleted(signed_in: Client):
    asset = stored_asset(16)
    first = signed_in.get(f"/assets/{asset.pk}/thumb/128/v3/").content
    thumbs.path_for(asset.sha256, 128).unlink()

    second = signed_in.get(f"/assets/{asset.pk}/thumb/128/v3/")

    assert second.status_code == 200
    assert second.content == first
    assert thumbs.path_for(asset.sha256, 128).is_file()


@pytest.mark.parametrize("damage", ["garbage", "cut short"])
def test_it_rebuilds_a_thumbnail_damaged_in_place_instead_of_serving_it(signed_in: Client, damage):
    """Found by a review: "garbage" written over a cached thumbnail was served as image/webp,
    immutable for a year, and no tool ever noticed."""
    asset = stored_asset(17)
    first = signed_in.get(f"/assets/{asset.pk}/thumb/128/v3/").content
    cached = thumbs.path_for(asset.sha256, 128)
    if damage == "garbage":
        cached.write_bytes(b"garbage")
    else:
        cached.write_bytes(first[: len(first) // 2])

    again = signed_in.get(f"/assets/{asset.pk}/thumb/128/v3/")

    assert again.status_code == 200
    assert again.content == first
    assert cached.read_bytes() == first


def test_it_refuses_a_thumbnail_size_it_does_not_make(signed_in: Client):
    asset = stored_asset(17)

    assert signed_in.get(f"/assets/{asset.pk}/thumb/4096/").status_code == 404


@pytest.mark.parametrize("earlier", ["thumb/128/", "thumb/128/v1/"])
def test_a_thumbnail_url_of_an_earlier_rendering_leads_to_the_current_one(
    signed_in: Client, earlier
):
    """A browser keeps a thumbnail a year without asking, so a new rendering (portraits
    turned upright) needs a new URL; a page still open from before gets the new picture."""
    asset = stored_asset(19)

    response = signed_in.get(f"/assets/{asset.pk}/{earlier}")

    assert response.status_code == 302
    assert response["Location"] == f"/assets/{asset.pk}/thumb/128/v3/"
    assert "immutable" not in response.get("Cache-Control", "")
    assert signed_in.get(f"/assets/{asset.pk}/thumb/4096/v1/").status_code == 404


def test_it_says_when_an_original_is_missing_from_the_store(signed_in: Client):
    asset = stored_asset(18)
    originals.path_for(asset.sha256, ".png").unlink()

    assert signed_in.get(f"/assets/{asset.pk}/original/").status_code == 503
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/v3/").status_code == 503


def test_the_batch_filter_tells_batches_of_one_title_apart(signed_in: Client, subject):
    """Found by a review: three batches titled "T" were listed "T / T / T"."""
    from studio.models import Batch

    first, second = a_batch(subject), a_batch(subject)
    Batch.objects.filter(pk__in=[first.pk, second.pk]).update(title="T")
    Batch.objects.filter(pk=first.pk).update(created_at="2026-11-02T09:05:00Z")
    Batch.objects.filter(pk=second.pk).update(created_at="2026-11-30T18:40:00Z")
    for seed, batch in enumerate((first, second)):
        stored_asset(seed + 1, batch=batch)

    page = signed_in.get("/gallery/").content.decode()

    assert ">T (2 Nov 2026, 09:05)</option>" in page
    assert ">T (30 Nov 2026, 18:40)</option>" in page
