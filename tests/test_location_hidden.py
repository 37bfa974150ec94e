"""A place hidden where readers look and the stripping did not (studio/tiff_places.py,
studio/jpeg_places.py, studio/mpf.py), and walks that cost too much.

Found by a review of hostile JPEGs with exiftool as the reader: a GPS pointer in IFD1, the
Exif or the Interop directory (and by a later one, in a SubIFD, IFD2, IFD1's Exif
directory, the first of two Exif directories and an Exif directory within one, in PNG and
WebP too); XMP or IPTC held under EXIF tags; EXIF split across two segments (which Pillow
joins); the further pictures of a multi-picture file (a comment, IPTC, XMP under another
header); a multi-picture index faked in a comment, which kept a video's place after the
picture; and floods of markers without a length, or padding spread over many gaps, that
cost seconds to walk.
"""

import io
import os
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from studio import engine, metadata, originals
from tests.location_parts import XMP, gps_exif, insert_after_soi, picture, pixels_of, saved

PLACE = b"+52.5200+013.4050/"
BOUND = 0.5  # seconds: a refusal by counting, before anything walks the file
# A phone's video after the picture: its user data says where it was filmed (ISO 6709).
VIDEO = b"\x00\x00\x00\x18ftypmp42" + bytes(12) + b"\x00\x00\x00\x22udta\xa9xyz" + PLACE
MODEL = (0x0110, 2, b"Pixel 9\x00")  # tag, type (ASCII), value
TURNED = (0x0112, 3, struct.pack("<H", 6))  # the orientation: turned a quarter
LATITUDE = struct.pack("<6I", 52, 1, 31, 1, 125, 10)  # 52° 31' 12.5"
GPS = [(1, 2, b"N\x00"), (2, 5, LATITUDE)]  # the GPS directory's entries


def tiff(directories: dict[str, list[tuple]], chain: tuple[str, ...] = ("0",)) -> bytes:
    """A little-endian TIFF block of named directories, IFD0 ("0") first, each entry
    (tag, type, value bytes) or (tag, "->", the name of the directory it points at);
    `chain`: IFD0 and the directories its "next" pointer leads to (IFD1)."""
    names = list(directories)
    places, at = {}, 8
    for name in names:
        places[name] = at
        at += 2 + 12 * len(directories[name]) + 4
    data, body = bytearray(), bytearray()
    for name in names:
        entries = directories[name]
        body += struct.pack("<H", len(entries))
        for tag, kind, value in entries:
            if kind == "->":
                body += struct.pack("<HHII", tag, 4, 1, places[value])
                continue
            count = len(value) // {2: 1, 3: 2, 5: 8, 7: 1}[kind]
            if len(value) <= 4:
                body += struct.pack("<HHI", tag, kind, count) + value.ljust(4, b"\x00")
            else:
                body += struct.pack("<HHII", tag, kind, count, at + len(data))
                data += value + b"\x00" * (len(value) % 2)
        following = chain[chain.index(name) + 1] if name in chain[:-1] else None
        body += struct.pack("<I", places[following] if following else 0)
    return b"II*\x00" + struct.pack("<I", 8) + bytes(body) + bytes(data)


def with_exif(block: bytes, *more: bytes) -> bytes:
    """A small JPEG whose header holds `block` as its EXIF, and `more` EXIF segments."""
    photo = saved(picture(), "JPEG", quality=90)
    for body in reversed((block, *more)):
        photo = insert_after_soi(photo, 0xE1, b"Exif\x00\x00" + body)
    return photo


def carrying(block: bytes, fmt: str) -> bytes:
    """A small picture in `fmt` whose EXIF is `block`: a JPEG's APP1, a PNG's `eXIf`, a
    WebP's `EXIF` chunk."""
    if fmt == "JPEG":
        return with_exif(block)
    return saved(picture(), fmt, exif=block)


def only_turned(data: bytes) -> bool:
    """Say whether the EXIF readers find in `data` is the orientation alone."""
    with Image.open(io.BytesIO(data)) as img:
        return dict(img.getexif()) == {0x0112: 6}


ROUTES = {
    "IFD1": ({"0": [TURNED, MODEL], "1": [(0x8825, "->", "g")], "g": GPS}, ("0", "1")),
    "Exif": ({"0": [TURNED, (0x8769, "->", "e")], "e": [(0x8825, "->", "g")], "g": GPS},),
    "Interop": (
        {
            "0": [TURNED, (0x8769, "->", "e")],
            "e": [(0xA005, "->", "i")],
            "i": [(0x8825, "->", "g")],
            "g": GPS,
        },
    ),
    # The routes a review's exiftool followed and a walker of the four above did not.
    "SubIFD": ({"0": [TURNED, (0x014A, "->", "s")], "s": [(0x8825, "->", "g")], "g": GPS},),
    "IFD1's Exif": (
        {"0": [TURNED], "1": [(0x8769, "->", "e")], "e": [(0x8825, "->", "g")], "g": GPS},
        ("0", "1"),
    ),
    "IFD2": ({"0": [TURNED], "1": [], "2": [(0x8825, "->", "g")], "g": GPS}, ("0", "1", "2")),
    "first of two Exif": (
        {
            "0": [TURNED, (0x8769, "->", "e"), (0x8769, "->", "f")],
            "e": [(0x8825, "->", "g")],
            "f": [],
            "g": GPS,
        },
    ),
    "Exif in Exif": (
        {
            "0": [TURNED, (0x8769, "->", "e")],
            "e": [(0x8769, "->", "f")],
            "f": [(0x8825, "->", "g")],
            "g": GPS,
        },
    ),
}


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_place_on_any_route_through_exif_goes_and_the_orientation_stays(route, fmt):
    photo = carrying(tiff(*ROUTES[route]), fmt)
    assert LATITUDE in photo

    clean = metadata.strip_location(photo)

    assert LATITUDE not in clean
    assert only_turned(clean), "EXIF keeps the orientation, and nothing else"
    assert pixels_of(clean) == pixels_of(photo)
    if fmt == "JPEG":
        assert len(clean) == len(photo), "the block is cut down in place"


@pytest.mark.parametrize(
    ("tag", "held"),
    [(0x02BC, XMP), (0x83BB, b"\x1c\x02\x5a\x00\x06Berlin"), (0x8649, b"8BIM\x04\x04Berlin")],
    ids=["XMP", "IPTC", "Photoshop"],
)
def test_a_metadata_block_held_under_an_exif_tag_is_blanked(tag, held):
    photo = with_exif(tiff({"0": [TURNED, MODEL, (tag, 7, held)]}))

    clean = metadata.strip_location(photo)

    assert held not in clean and len(clean) == len(photo)
    assert only_turned(clean)
    assert pixels_of(clean) == pixels_of(photo)


def test_exif_split_across_two_segments_loses_the_gps_pillow_joins_into_it():
    """Pillow appends a second EXIF segment to the first: IFD0 pointing past its own end
    reaches a GPS directory in the second, which no single block showed."""
    model_at = 8 + 2 + 12 * 2 + 4  # after IFD0's two entries and its next pointer
    end = model_at + 8  # the first block's length: the GPS directory is past it
    entries = struct.pack("<HHII", 0x0110, 2, 8, model_at) + struct.pack("<HHII", 0x8825, 4, 1, end)
    first = b"II*\x00" + struct.pack("<IH", 8, 2) + entries + bytes(4) + b"Pixel 9\x00"
    gps = struct.pack("<H", 2) + struct.pack("<HHI", 1, 2, 2) + b"N\x00\x00\x00"
    gps += struct.pack("<HHII", 2, 5, 3, end + 30) + bytes(4) + LATITUDE
    photo = with_exif(first, gps)
    with Image.open(io.BytesIO(photo)) as img:
        assert img.info["exif"].count(LATITUDE) == 1, "Pillow joins the two"

    clean = metadata.strip_location(photo)

    assert LATITUDE not in clean
    with Image.open(io.BytesIO(clean)) as img:
        assert 0x0110 not in img.getexif() and 0x8825 not in img.getexif()


def multi_picture(second_header: bytes = b"", trailer: bytes = b"") -> bytes:
    """A two-picture MPO as Pillow writes it, with `second_header` after the second
    picture's start of image (the index's size for it made to match), then `trailer`."""
    frames = [picture(), picture().rotate(180)]
    data = saved(frames[0], "MPO", save_all=True, append_images=frames[1:])
    with Image.open(io.BytesIO(data)) as img:
        first, second = (entry["Size"] for entry in img.mpinfo[0xB002])
    entry = data.index(struct.pack("<LLLHH", 0x030000, first, 0, 0, 0))
    out = bytearray(data[: first + 2] + second_header + data[first + 2 :])
    struct.pack_into("<L", out, entry + 16 + 4, second + len(second_header))
    return bytes(out) + trailer


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def test_the_further_pictures_of_a_multi_picture_file_lose_what_the_first_would():
    iptc = b"8BIM\x04\x04\x00\x00\x00\x00\x00\x0b\x1c\x02\x5a\x00\x06Berlin\x00"
    hidden = (
        segment(0xFE, PLACE)
        + segment(0xED, b"Photoshop 3.0\x00" + iptc)
        + segment(0xE1, b"XMP\x00" + XMP)
    )
    photo = multi_picture(hidden)

    clean = metadata.strip_location(photo)

    assert len(clean) == len(photo), "nothing moves: the index finds pictures by offset"
    for place in (PLACE, b"Berlin", b"GPSLatitude"):
        assert place not in clean, place
    assert pixels_of(clean) == pixels_of(photo)
    with Image.open(io.BytesIO(clean)) as img:
        assert img.n_frames == 2


def test_what_follows_a_multi_picture_files_last_picture_goes():
    photo = multi_picture(trailer=VIDEO)

    clean = metadata.strip_location(photo)

    assert clean == photo[: -len(VIDEO)]
    assert pixels_of(clean) == pixels_of(photo)


def test_an_index_faked_in_a_comment_keeps_nothing_after_the_picture():
    plain = saved(picture(), "JPEG", quality=90)
    photo = insert_after_soi(plain, 0xFE, b"\xff\xe2\x00\x06MPF\x00") + VIDEO

    clean = metadata.strip_location(photo)

    assert clean == plain


def test_a_multi_picture_photo_with_a_large_video_after_it_is_stored_without_it(make_subject):
    """The review's 12 MP photo with 8 MB of video after its pictures was refused, its
    video's bytes counted as scans; the video goes, and the pictures are stored."""
    photo = multi_picture(trailer=VIDEO + os.urandom(8 * 1024 * 1024))

    asset = engine.add_reference(subject=make_subject("Ada"), data=photo, file_name="hdr.jpg")

    stored = originals.read(asset.sha256, asset.mime)
    assert len(stored) < len(photo) - 8 * 1024 * 1024 and PLACE not in stored


def refused_at_once(subject, photo: bytes, said: str) -> None:
    """Upload `photo` for `subject`: refused in words (`said`), within BOUND seconds."""
    started = time.perf_counter()
    with pytest.raises(originals.NotAnImage, match=said):
        engine.add_reference(subject=subject, data=photo, file_name="hostile.jpg")
    seconds = time.perf_counter() - started
    assert seconds < BOUND, f"{len(photo):,} bytes refused after {seconds:.2f} s (bound {BOUND} s)"


@pytest.mark.parametrize("marker", [b"\xff\x01", b"\xff\xd8"], ids=["TEM", "SOI"])
def test_a_flood_of_markers_without_a_length_after_the_scan_is_refused_at_once(
    make_subject, marker
):
    """12 million of them cost 1.3 s a walk, twice, and were stored (a review)."""
    plain = saved(picture(), "JPEG", quality=90)
    photo = plain[:-2] + marker * 6_000_000 + plain[-2:]

    refused_at_once(make_subject("Ada"), photo, "more than 1024 parts between its scans")


def test_padding_spread_over_the_headers_gaps_is_refused_at_once(make_subject):
    """400 gaps of 32 KB each passed the 64 KB a gap and cost Pillow 4 s at every open."""
    plain = saved(picture(), "JPEG", quality=90)
    gap = segment(0xFE, b"") + b"\xff\x00" * 16_000
    photo = plain[:2] + gap * 400 + plain[2:]

    refused_at_once(make_subject("Ada"), photo, "more than 64 KB of padding")


@settings(max_examples=40, deadline=None)
@given(
    hidden=st.lists(
        st.tuples(
            st.sampled_from([0xFE, *range(0xE0, 0xF0)]),
            st.binary(max_size=200).map(lambda body: b"X" + body + PLACE),
        ),
        max_size=5,
    ),
    trailer=st.binary(max_size=300),
)
def test_whatever_a_further_picture_holds_it_loses_in_place_and_the_trailer_goes(hidden, trailer):
    photo = multi_picture(b"".join(segment(m, body) for m, body in hidden), trailer=trailer)

    clean = metadata.strip_location(photo)

    assert len(clean) == len(photo) - len(trailer)
    assert PLACE not in clean
    assert pixels_of(clean) == pixels_of(photo)


def three_pictures() -> bytes:
    """An MPO of three pictures as Pillow writes it, each with the EXIF and its GPS (and the
    last one's size in its index larger than the file: Pillow writes it so)."""
    frames = [picture(), picture().rotate(180), picture().rotate(90)]
    return saved(frames[0], "MPO", save_all=True, append_images=frames[1:], exif=gps_exif())


WRITTEN = struct.pack("<6I", 52, 1, 31, 1, 25, 2)  # the latitude as Pillow writes it


def test_every_picture_of_a_three_picture_file_loses_its_gps_in_place():
    photo = three_pictures()
    assert photo.count(WRITTEN) == 3

    clean = metadata.strip_location(photo)

    assert WRITTEN not in clean and len(clean) == len(photo)
    assert pixels_of(clean) == pixels_of(photo)


def test_a_picture_an_overlapping_index_entry_covers_is_still_looked_at():
    """Found by a re-review: an entry whose size covered the next picture had that picture
    left as it was, its GPS with it (Pillow reads each picture from its offset)."""
    photo = bytearray(three_pictures())
    with Image.open(io.BytesIO(bytes(photo))) as img:
        second, third = img.mpinfo[0xB002][1:]
    entry = photo.index(struct.pack("<LL", second["Size"], second["DataOffset"]))
    struct.pack_into("<L", photo, entry, second["Size"] + third["Size"])

    clean = metadata.strip_location(bytes(photo))

    assert WRITTEN not in clean


def test_the_last_index_of_a_header_is_the_one_read_as_pillow_reads_it():
    """A second index before the real one, naming the first picture alone, had the walk
    cut the further pictures off (or, naming others, leave the real ones unread)."""
    photo = multi_picture(
        segment(0xE1, b"Exif\x00\x00" + tiff({"0": [MODEL, (0x8825, "->", "g")], "g": GPS}))
    )
    lone = b"MPF\x00II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0xB002, 7, 16, 26)
    lone += bytes(4) + struct.pack("<LLLHH", 0x030000, 100, 0, 0, 0)
    real = photo.index(b"\xff\xe2", 2)
    photo = photo[:real] + segment(0xE2, lone) + photo[real:]

    clean = metadata.strip_location(photo)

    assert len(clean) == len(photo) and LATITUDE not in clean
    with Image.open(io.BytesIO(clean)) as img:
        assert img.n_frames == 2


def test_an_index_that_cannot_be_read_keeps_no_trailer():
    plain = insert_after_soi(saved(picture(), "JPEG", quality=90), 0xE2, b"MPF\x00XX")

    clean = metadata.strip_location(plain + VIDEO + segment(0xFE, PLACE))

    assert clean == plain


@pytest.mark.parametrize("marker", [b"\xff\xd8", b"\xff\xd9", b"\xff\xf0", b"\xff\xc8"])
def test_a_flood_of_markers_without_a_length_before_the_scan_is_refused_at_once(
    make_subject, marker
):
    """A second SOI or an EOI in a header stopped its check (a "broken header", left to
    Pillow), which read on: 12 million cost Pillow's open 4.4 s (a re-review)."""
    plain = saved(picture(), "JPEG", quality=90)
    photo = plain[:2] + marker * 6_000_000 + plain[2:]

    refused_at_once(make_subject("Ada"), photo, "header has more than 1024 parts")


def test_a_further_pictures_header_of_millions_of_parts_is_refused_at_once(make_subject):
    photo = multi_picture(b"\xff\x00" * 6_000_000)

    refused_at_once(make_subject("Ada"), photo, "header has more than 1024 parts")
