"""A corpus of bad uploads: each gets a clear 400 and nothing is stored (hardening).

Every file goes through both doors, the JSON API and the studio page, which share
the originals store's checks.
"""

import io
import time
import zlib
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.test.client import encode_multipart
from django.urls import reverse
from PIL import Image

from studio import engine, originals
from studio.api.auth import issue_token
from studio.models import Asset
from tests.factories import png_bytes
from tests.hostile import (
    animated,
    app1_trailer_jpeg,
    exif_parts_jpeg,
    growing_gif,
    many_block_gif,
    many_chunk_png,
    many_chunk_webp,
    many_frame_gif,
    many_segment_jpeg,
    multi_picture_jpeg,
    one_channel_scan_jpeg,
    padded_jpeg,
    png_chunk,
    progressive_jpeg,
    repeated_scans,
    split_idat_png,
)
from tests.processes import run_snippet

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
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "the file is damaged or incomplete"),
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
        # 23 KB: 1,000 one-pixel frames on a 3000 x 3000 canvas (9 billion pixels to decode).
        "GIF with 1,000 frames": (many_frame_gif(width=3000, height=3000), "1000 frames"),
        "GIF with a large canvas, few frames": (
            many_frame_gif(width=3000, height=3000, frames=30),
            "too many pixels across its frames",
        ),
        # 6000 x 6000 is within a still's cap, but each frame is composed onto canvases of
        # that size, several held at once: 5 frames once took 900 MB.
        "animation on a huge canvas": (many_frame_gif(frames=2), "pixels a frame"),
        # A 1 x 1 screen whose later frames Pillow grows the canvas to: once taken as
        # a 1 x 1 image after decoding gigabytes (found by a review, over uvicorn).
        "GIF whose frames outgrow its screen": (growing_gif(), "4000 x 4000 pixels"),
        # Pillow reads a JPEG's header a byte at a time: 24 MB of this once took 13 s.
        "JPEG padded with fill bytes": (padded_jpeg(byte=0xFF), "padding"),
        "JPEG with junk between its segments": (padded_jpeg(byte=0x00), "padding"),
        "JPEG with thousands of header segments": (many_segment_jpeg(), "more than 1024 parts"),
        "JPEG trailed by EXIF headers": (app1_trailer_jpeg(5000), "at most 1024 are accepted"),
        # Pillow joins a header's EXIF parts by copying: 399 of 64 KB cost seconds an open.
        "JPEG whose EXIF is in 399 parts": (exif_parts_jpeg(), "at most 16 are accepted"),
        # A decoder holds every coefficient of a progressive frame: 306 MB for this one.
        "progressive CMYK JPEG of 6324 x 6324": (progressive_jpeg(), "at most 128 MB"),
        "JPEG whose first scan codes one channel of four": (
            one_channel_scan_jpeg(),
            "at most 128 MB",
        ),
        # Every scan is a pass over the whole image: 212 KB of these once took 22 s.
        "JPEG that repeats its scans": (repeated_scans(), "passes"),
        "APNG with too many frames": (animated("PNG", 301), "at most 300 are accepted"),
        # 50 MB of colour profile in 50 KB: said without Pillow's own names (a review).
        "PNG whose colour profile unpacks to 50 MB": (
            png[:33]
            + png_chunk(b"iCCP", b"icc\0\0" + zlib.compress(b"a" * 50 * 1024 * 1024, 9))
            + png[33:],
            "a colour profile or text that is far too large once unpacked",
        ),
        "animated WebP with too many frames": (animated("WEBP", 301), "at most 300 are accepted"),
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


def test_a_phones_multi_picture_jpeg_is_taken_as_the_jpeg_it_is_through_both_doors(
    client: Client, person, make_subject
):
    """Pillow calls it MPO; it is a JPEG every reader shows as its first picture (once a 500)."""
    subject = make_subject("Ada")
    token = issue_token(user=person)
    client.force_login(person)
    data = multi_picture_jpeg()

    api = client.post(
        f"/api/v1/subjects/{subject.pk}/references",
        {"file": SimpleUploadedFile("phone.jpg", data, content_type="image/jpeg")},
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    page = client.post(
        reverse("studio:subject", args=[subject.pk]),
        {"photo": SimpleUploadedFile("phone.jpg", data, content_type="image/jpeg")},
    )

    assert api.status_code == 201, api.content
    assert page.status_code == 302, page.content
    asset = Asset.objects.get(pk=api.json()["id"])
    assert (asset.mime, asset.width, asset.height) == ("image/jpeg", 64, 48)
    assert (Path(settings.AVATARS_DATA_DIR) / "originals" / f"{asset.sha256}.jpg").is_file()


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


BOUND_PROBE = """
import os, resource, sys, time
import django
django.setup()
from studio import metadata, originals
from studio.ember.simulator import Picture, render_clip
from tests.hostile import (
    app1_trailer_jpeg, flat_webp, growing_gif, many_frame_gif, multi_picture_jpeg,
    one_channel_scan_jpeg, padded_jpeg, progressive_jpeg, repeated_scans
)

data = eval(sys.argv[1])
clip = render_clip(Picture(seed="1", provider="flux", frame="clip", candidate="1", stamp="job_1"))
originals.inspect(clip)  # warm Pillow's plugins up before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    # What an upload goes through: the cheap checks, the location stripping, the decode.
    originals.inspect(metadata.strip_location(originals.precheck(data)))
    print("accepted")
except originals.NotAnImage as exc:
    print("refused", exc)
print(time.perf_counter() - started)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


SLOW_FILES = {
    # The 23 KB GIF (1,000 frames of 6000 x 6000) that once cost 26 s of CPU and 300 MB.
    "many_frame_gif()": "frame",
    # The 212 KB JPEG (6000 x 6000, its scans repeated) that once cost 22 s and 213 MB.
    "repeated_scans(6000, 6000, 300)": "passes",
    # 26 MB: an 8 x 8 JPEG, then EXIF segment headers the location stripping once looked
    # at one by one, for 9 to 13 s.
    "app1_trailer_jpeg()": "at most 1024 are accepted",
    # 1.3 KB that says 6324 x 6324 CMYK, progressive: a decoder holds 306 MB of coefficients
    # for it (a review's 627 KB one, decoded, cost 462 MB).
    "progressive_jpeg()": "at most 128 MB",
    # 354 bytes, sequential, its first scan one channel of four: the decoder holds every
    # coefficient for the scans to come (a review: from 72 to 532 MB over uvicorn).
    "one_channel_scan_jpeg()": "at most 128 MB",
    "one_channel_scan_jpeg(frame=0xC9)": "at most 128 MB",
    # The 24 MB JPEG of fill bytes that once cost 13 s.
    "padded_jpeg(24 * 1024 * 1024)": "padding",
    # A 64 x 48 photo, then a 6000 x 6000 picture of 80 passes: once 2 s, as the second
    # picture was decoded too. Only the photo shown is decoded now: taken, in no time.
    "multi_picture_jpeg(second=6000, repeat=80)": "accepted",
    # A 1.6 KB still WebP of 6324 x 6324 that once cost the web process over 600 MB: Pillow
    # decodes every WebP with libwebp's animation decoder, onto canvases of the whole size.
    "flat_webp(6324)": "a WebP image may have at most",
    # 1.2 MB: a 1 x 1 screen, then 20 frames of 9400 x 9400 that Pillow grows the canvas
    # to; over uvicorn it once took 19.6 s and 1.1 GB, and was stored as a 1 x 1 image.
    "growing_gif(9400, 9400, 20)": "too many pixels (9400 x 9400)",
}


@pytest.mark.parametrize("build", list(SLOW_FILES))
def test_a_small_slow_file_is_refused_in_bounded_time_and_memory(tmp_path, build):
    """Answered before decoding what is slow: within a second and 50 MB, not minutes and GBs."""
    done = run_snippet(BOUND_PROBE, build, data_dir=tmp_path)
    verdict, seconds, grown_mb = done.stdout.strip().splitlines()
    assert SLOW_FILES[build] in verdict, verdict
    assert float(seconds) < 1.0, f"inspecting took {float(seconds):.2f} s (bound: 1 s)"
    assert float(grown_mb) < 50, f"memory grew by {float(grown_mb):.1f} MB (bound: 50 MB)"


def test_the_largest_webp_accepted_decodes_within_a_bounded_memory(tmp_path):
    """At the WebP cap (10 MP): the decode the caps allow, well under the still's few hundred MB."""
    done = run_snippet(BOUND_PROBE, "flat_webp(3162)", data_dir=tmp_path)
    verdict, seconds, grown_mb = done.stdout.strip().splitlines()
    assert verdict == "accepted", verdict
    assert float(grown_mb) < 120, f"memory grew by {float(grown_mb):.1f} MB (bound: 120 MB)"
    assert float(seconds) < 5.0, f"inspecting took {float(seconds):.2f} s (bound: 5 s)"


def test_ember_clips_stay_within_the_frame_caps(tmp_path):
    from studio import originals
    from studio.ember.simulator import Picture, render_clip

    info = originals.inspect(
        render_clip(Picture(seed="3", provider="flux", frame="clip", candidate="1", stamp="job_3"))
    )

    assert info.mime == "image/webp" and info.frames > 1


def test_an_upload_takes_exactly_one_file_through_both_doors(person, make_subject):
    subject = make_subject("Ada")
    token = issue_token(user=person)
    browser = Client(raise_request_exception=False)
    browser.force_login(person)
    two = [SimpleUploadedFile(f"p{i}.png", png_bytes(40 + i), "image/png") for i in range(2)]
    before = stored()

    api = browser.post(
        f"/api/v1/subjects/{subject.pk}/references",
        {"file": two},
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    for upload in two:
        upload.seek(0)
    page = browser.post(reverse("studio:subject", args=[subject.pk]), {"photo": two})

    assert api.status_code == 400 and api.json()["error"]["code"] == "invalid_upload"
    assert page.status_code == 400
    assert stored() == before


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: many_chunk_png(2_000_000), "The PNG has more than 100,000 parts."),
        (lambda: many_chunk_png(2_000_000, kind=b"tEXt"), "The PNG has more than 100,000 parts."),
        (lambda: many_chunk_webp(3_000_000), "The WebP has more than 10,000 parts."),
        (lambda: many_block_gif(12_000_000), "The GIF has more than 300,000 parts."),
        (
            lambda: many_block_gif(5_000_000, extensions=True),
            "The GIF has more than 300,000 parts.",
        ),
        # Found by a review: one byte that starts no block stopped the count, not Pillow,
        # and the file cost 3.5 s of CPU and 1 GB of memory before it was refused.
        (lambda: many_block_gif(12_000_000, stray=b"\x00"), "The GIF has more than 300,000 parts."),
        (lambda: many_block_gif(0, stray=b"\x00" * 24_000_000), "The GIF has more than 300,000"),
    ],
    ids=[
        "png-unknown-chunks",
        "png-text-chunks",
        "webp-unknown-chunks",
        "gif-one-byte-sub-blocks",
        "gif-empty-comments",
        "gif-sub-blocks-after-a-stray-byte",
        "gif-of-stray-bytes",
    ],
)
def test_a_file_of_millions_of_empty_chunks_is_refused_before_anything_walks_them(
    make_subject, build, message
):
    """24 MB of empty parts: stripping and Pillow would walk them in Python for seconds."""
    data = build()
    assert len(data) > 20 * 1024 * 1024, len(data)
    subject = make_subject("Ada")
    before = stored()

    started = time.perf_counter()
    with pytest.raises(originals.NotAnImage, match=message):
        engine.add_reference(subject=subject, data=data, file_name="many")
    seconds = time.perf_counter() - started

    assert seconds < 0.5, f"refused after {seconds:.2f} s (bound: 0.5 s)"
    assert stored() == before


def test_a_gif_of_two_hundred_thousand_comment_parts_is_stored(make_subject):
    """Under the bound a GIF is taken, however it is cut up."""
    data = many_block_gif(200_000)
    subject = make_subject("Ada")

    asset = engine.add_reference(subject=subject, data=data, file_name="comments.gif")

    assert (asset.width, asset.height, asset.mime) == (64, 48, "image/gif")


def test_a_png_whose_image_data_comes_in_twenty_thousand_chunks_is_stored(make_subject):
    """Some encoders write small IDAT chunks: well under the bound, the photo is taken."""
    data = split_idat_png(20_000)
    subject = make_subject("Ada")

    started = time.perf_counter()
    asset = engine.add_reference(subject=subject, data=data, file_name="split.png")
    seconds = time.perf_counter() - started

    assert (asset.width, asset.height, asset.mime) == (1200, 900, "image/png")
    assert seconds < 2.0, f"stored after {seconds:.2f} s (bound: 2 s)"


def test_a_jpeg_of_millions_of_tiny_segments_is_refused_before_anything_walks_it(make_subject):
    """24 MB of 4-byte segments: stripping location would walk them in Python for seconds."""
    data = many_segment_jpeg(6_000_000)
    subject = make_subject("Ada")
    before = stored()

    started = time.perf_counter()
    with pytest.raises(originals.NotAnImage, match="more than 1024 parts"):
        engine.add_reference(subject=subject, data=data, file_name="many.jpg")
    seconds = time.perf_counter() - started

    assert seconds < 0.5, f"refused after {seconds:.2f} s (bound: 0.5 s)"
    assert stored() == before


def test_a_jpeg_whose_colour_profile_holds_scan_markers_is_stored(make_subject):
    """Found by a review: every 0xFF 0xDA of a profile's bytes was counted as a pass, and a
    64 x 64 photo with a large profile was refused for its "244 passes"."""
    profile = b"\0" * 16 + b"RGB " + b"\xff\xda" * 200_000
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (90, 120, 200)).save(out, "JPEG", icc_profile=profile)
    subject = make_subject("Ada")

    asset = engine.add_reference(subject=subject, data=out.getvalue(), file_name="profile.jpg")

    assert (asset.width, asset.height, asset.mime) == (64, 64, "image/jpeg")


@pytest.mark.parametrize("media", ["MULTIPART/FORM-DATA", "Multipart/Form-Data"])
def test_an_upload_whose_media_type_is_in_capitals_is_an_upload_all_the_same(
    person, make_subject, media
):
    """Media types ignore case (found by a review: "not a valid multipart form")."""
    subject = make_subject("Ada")
    body = encode_multipart("BoUnDaRy", {"file": SimpleUploadedFile("p.png", png_bytes(7))})

    answer = Client().post(
        f"/api/v1/subjects/{subject.pk}/references",
        body,
        content_type=f"{media}; boundary=BoUnDaRy",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(user=person)}",
    )

    assert answer.status_code == 201, answer.content[:300]
    assert answer.json()["mime"] == "image/png"


def test_a_studio_form_whose_fields_pass_their_limit_is_answered_naming_it(person, make_subject):
    """Found by a review over uvicorn: a 3 MB field beside a photo got a page naming no limit."""
    subject = make_subject("Ada")
    browser = Client(raise_request_exception=False)
    browser.force_login(person)
    page = reverse("studio:subject", args=[subject.pk])
    before = stored()

    answer = browser.post(
        page,
        {"photo": SimpleUploadedFile("p.png", png_bytes(8)), "note": "x" * (3 * 1024 * 1024)},
        HTTP_REFERER=f"http://testserver{page}",
    )

    body = answer.content.decode()
    assert answer.status_code == 413, body[:300]
    assert "the limit is 2.5 MB for JSON and form fields" in body
    assert f'href="{page}"' in body  # back to the form it came from
    assert stored() == before
