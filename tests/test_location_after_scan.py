"""Location kept after a JPEG's first scan or in application segments Pillow does not read
(studio/metadata.py, studio/jpeg.py `later_parts`).

Left by the last session's review: a comment before the end-of-image marker or between a
progressive JPEG's scans, bytes after the end marker (a motion photo's video, which can
say where it was filmed), XMP under an APP2 header, text in APP12 or in an APP13 not
Photoshop's were stored as they came, served by the API and sent to Ember.
"""

import io
import re
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from studio import engine, metadata, originals
from tests.location_parts import XMP, insert_after_soi, picture, pixels_of, saved

PLACE = b"GPSLatitude"
# The end of a motion photo: an MP4 whose user data says where it was filmed (ISO 6709).
VIDEO = (
    b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 12 + b"\x00\x00\x00\x20udta\xa9xyz+52.5200+013.4050/"
)


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def scans_of(data: bytes) -> list[int]:
    """Where each scan's marker is, in a JPEG Pillow wrote (no profile, no EXIF): 0xFF 0xDA
    cannot occur in compressed data, nor in the tables Pillow writes."""
    return [found.start() for found in re.finditer(b"\xff\xda", data)]


def test_it_drops_a_comment_just_before_the_end_of_the_picture():
    plain = saved(picture(), "JPEG", quality=90)
    photo = plain[:-2] + segment(0xFE, XMP) + plain[-2:]

    clean = metadata.strip_location(photo)

    assert clean == plain and PLACE not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize("marker", [0xFE, 0xE1, 0xEC], ids=["comment", "APP1", "APP12"])
def test_it_drops_what_sits_between_a_progressive_jpegs_scans(marker):
    plain = saved(picture(), "JPEG", quality=90, progressive=True)
    second = scans_of(plain)[1]
    body = XMP if marker != 0xE1 else b"http://ns.adobe.com/xap/1.0/\x00" + XMP
    photo = plain[:second] + segment(marker, body) + plain[second:]
    assert len(scans_of(photo)) == len(scans_of(plain)) > 2

    clean = metadata.strip_location(photo)

    assert clean == plain and PLACE not in clean
    assert pixels_of(clean) == pixels_of(photo)


def test_it_drops_a_motion_photos_video_after_the_end_of_the_picture():
    plain = saved(picture(), "JPEG", quality=90)
    photo = plain + VIDEO

    clean = metadata.strip_location(photo)

    assert clean == plain and b"+52.5200" not in clean


def test_an_uploaded_photo_is_stored_without_its_trailer(make_subject):
    plain = saved(picture(), "JPEG", quality=90)
    photo = plain[:-2] + segment(0xFE, XMP) + plain[-2:] + VIDEO

    asset = engine.add_reference(subject=make_subject("Ada"), data=photo, file_name="m.jpg")

    stored = originals.read(asset.sha256, asset.mime)
    assert stored == plain, "the comment and the video went, and nothing else"


@pytest.mark.parametrize(
    ("marker", "body"),
    [
        (0xE2, b"XMP\x00" + XMP),  # XMP under another application's header
        (0xEC, b"Ducky\x00" + PLACE + b" 52.52 N"),  # text a maker's tool writes
        (0xED, b"Adobe_CM\x00" + PLACE + b" 52.52 N"),  # an APP13 not Photoshop's
        (0xEB, b"JP\x00\x00" + PLACE),  # APP11: JPEG XT and C2PA boxes, which may hold EXIF
        (0xE0, b"AVI1\x00" + PLACE),  # an APP0 that is no JFIF
    ],
    ids=["APP2-xmp", "APP12", "APP13-other", "APP11", "APP0-other"],
)
def test_it_drops_application_segments_that_say_nothing_about_the_pixels(marker, body):
    plain = saved(picture(), "JPEG", quality=90)
    photo = insert_after_soi(plain, marker, body)

    clean = metadata.strip_location(photo)

    assert clean == plain and PLACE not in clean


def test_it_keeps_a_colour_profile_and_adobes_colour_transform():
    """A CMYK JPEG's Adobe segment says how to read its channels, and a profile how to show
    them: both stay, byte for byte."""
    photo = saved(picture("CMYK"), "JPEG", quality=90, icc_profile=b"\x00" * 128)
    assert b"Adobe" in photo and b"ICC_PROFILE" in photo

    assert metadata.strip_location(photo) == photo


def test_a_multi_picture_files_further_pictures_stay_where_its_index_finds_them():
    frames = [picture(), picture().rotate(180)]
    photo = saved(frames[0], "MPO", save_all=True, append_images=frames[1:])

    clean = metadata.strip_location(photo)

    assert clean == photo
    with Image.open(io.BytesIO(clean)) as img:
        assert img.n_frames == 2


def test_a_jpeg_of_too_many_parts_between_its_scans_is_refused_in_bounded_time(make_subject):
    """Millions of empty comments between two scans would each be a turn of a Python walk:
    past jpeg.MAX_LATER_SEGMENTS the file is refused before anything walks it again."""
    plain = saved(picture(), "JPEG", quality=90, progressive=True)
    second = scans_of(plain)[1]
    photo = plain[:second] + b"\xff\xfe\x00\x02" * 6_000_000 + plain[second:]

    started = time.perf_counter()
    with pytest.raises(originals.NotAnImage, match="more than 1024 parts between its scans"):
        engine.add_reference(subject=make_subject("Ada"), data=photo, file_name="many.jpg")
    seconds = time.perf_counter() - started

    assert seconds < 0.5, f"{len(photo):,} bytes refused after {seconds:.2f} s (bound 0.5 s)"


def test_a_thousand_comments_between_scans_are_dropped_in_bounded_time():
    plain = saved(picture(), "JPEG", quality=90, progressive=True)
    second = scans_of(plain)[1]
    photo = plain[:second] + segment(0xFE, XMP) * 1000 + plain[second:]

    started = time.perf_counter()
    clean = metadata.strip_location(photo)
    seconds = time.perf_counter() - started

    assert clean == plain
    assert seconds < 0.5, f"{len(photo):,} bytes stripped in {seconds:.2f} s (bound 0.5 s)"


# --- properties --------------------------------------------------------------------------

MARKERS = st.sampled_from([0xFE, *range(0xE0, 0xF0)])  # a comment, any application segment
# A body no kept segment starts with (JFIF, a profile, an index, Adobe's, a standard EXIF).
BODIES = st.binary(max_size=300).map(lambda body: b"X" + body + PLACE)


def boundaries(data: bytes) -> list[int]:
    """Where each segment after the start of image begins, in a JPEG Pillow wrote at
    quality 50 to 95 (no byte of its tables is 0xFF): before the first scan, between scans
    and before the end marker."""
    return [m.start() for m in re.finditer(rb"\xff[^\x00\xd0-\xd7\xff]", data)][1:]


@settings(max_examples=60, deadline=None)
@given(
    progressive=st.booleans(),
    mode=st.sampled_from(["RGB", "L", "CMYK"]),
    quality=st.integers(50, 95),
    inserted=st.lists(st.tuples(st.integers(0), MARKERS, BODIES), max_size=6),
    trailer=st.binary(max_size=200),
)
def test_whatever_segments_are_put_wherever_the_stripped_file_is_the_plain_one(
    progressive, mode, quality, inserted, trailer
):
    plain = saved(picture(mode), "JPEG", quality=quality, progressive=progressive)
    places = boundaries(plain)
    photo = bytearray(plain)
    # From the last place back, so that each place is still where it was found.
    for where, marker, body in sorted(inserted, key=lambda i: -places[i[0] % len(places)]):
        at = places[where % len(places)]
        photo[at:at] = segment(marker, body)
    photo = bytes(photo + trailer)
    originals.precheck(photo)  # taken: what follows is what an upload goes through

    clean = metadata.strip_location(photo)

    assert clean == plain
    if inserted:
        assert pixels_of(clean) == pixels_of(photo)


@settings(max_examples=80, deadline=None)
@given(
    progressive=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0), st.binary(min_size=1, max_size=4)), max_size=8),
    cut=st.none() | st.integers(0),
)
def test_a_damaged_jpeg_is_refused_or_stripped_never_a_crash(progressive, edits, cut):
    """Bytes written over anywhere and an end cut off: the checks refuse it in words, or
    the stripping walks it to the end without raising, and adds nothing."""
    photo = bytearray(saved(picture(), "JPEG", quality=90, progressive=progressive))
    for where, data in edits:
        at = where % len(photo)
        photo[at : at + len(data)] = data
    if cut is not None:
        del photo[2 + cut % (len(photo) - 2) :]
    photo = bytes(photo)

    try:
        originals.precheck(photo)
    except originals.NotAnImage:
        return
    stripped = metadata.strip_location(photo)  # no other exception escapes

    assert len(stripped) <= len(photo)
