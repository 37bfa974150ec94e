"""What a reader other than Pillow reads, stripped as that reader reads it (found by a
re-review with exiftool): a picture only a multi-picture file's first index names, a JFXX
thumbnail's own EXIF, and an orientation written as a LONG or written twice."""

import io
import struct
import zlib

import pytest
from PIL import Image, ImageCms

from studio import jpeg_places, metadata, mpf
from tests.location_parts import insert_after_soi, picture, pixels_of, saved

LATITUDE = struct.pack(">6I", 51, 1, 30, 1, 1234, 100)
IPTC_CITY = b"\x1c\x02\x5a\x00\x09Reykjavik"


def gps_block() -> bytes:
    """A big-endian TIFF block: IFD0 pointing at a GPS directory holding a latitude."""
    ifd0 = struct.pack(">H", 1) + struct.pack(">HHII", 0x8825, 4, 1, 26) + bytes(4)
    gps = struct.pack(">H", 1) + struct.pack(">HHII", 2, 5, 3, 44) + bytes(4)
    return b"MM\x00*" + struct.pack(">I", 8) + ifd0 + gps + LATITUDE


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def index(pictures: list[tuple[int, int]]) -> bytes:
    """An MPF index (APP2) naming the first picture and then `pictures` (size, offset)."""
    entries = [(0x20030000, 0, 0), *((0, size, offset) for size, offset in pictures)]
    body = b"MM\x00*" + struct.pack(">I", 8) + struct.pack(">H", 2)
    body += struct.pack(">HHI", 0xB000, 7, 4) + b"0100"
    body += struct.pack(">HHII", 0xB002, 7, 16 * len(entries), 8 + 2 + 24 + 4) + bytes(4)
    body += b"".join(struct.pack(">IIIHH", a, s, o, 0, 0) for a, s, o in entries)
    return segment(0xE2, b"MPF\x00" + body)


def two_indexes(hidden: bytes, last: bytes) -> bytes:
    """A first picture whose header holds two indexes: the first names `hidden`, the second
    (the one Pillow reads) `last`; the three pictures one after another."""
    first = saved(picture(), "JPEG")

    def built(hidden_at: int, last_at: int) -> bytes:
        return (
            first[:2]
            + index([(len(hidden), hidden_at)])
            + index([(len(last), last_at)])
            + first[2:]
        )

    draft = built(0, 0)
    bases = [at + 4 for at in range(len(draft)) if draft.startswith(b"MPF\x00", at)]
    start = len(draft)
    data = built(start - bases[0], start + len(hidden) - bases[1])
    return data + hidden + last


@pytest.mark.parametrize(
    "held",
    [
        segment(0xED, b"Photoshop 3.0\x00" + IPTC_CITY),
        segment(0xE1, b"\x00\x00\x00\x00Exif\x00\x00" + gps_block()),
        segment(0xFE, b"Taken at Hallgrimskirkja, Reykjavik"),
    ],
    ids=["IPTC", "EXIF after junk", "comment"],
)
def test_a_picture_only_a_first_index_names_is_stripped_too(held):
    """Pillow reads a header's last index; exiftool reads every one, and read a place in a
    picture only the first named."""
    hidden = saved(picture().rotate(90), "JPEG")
    hidden = hidden[:2] + held + hidden[2:]
    photo = two_indexes(hidden, saved(picture().rotate(180), "JPEG"))
    body = held[4:]
    assert body in photo

    clean = metadata.strip_location(photo)

    assert body not in clean and len(clean) == len(photo), "not stripped in place"
    assert pixels_of(clean) == pixels_of(photo)


def test_a_jfxx_thumbnail_goes_with_its_exif():
    thumbnail = insert_after_soi(
        saved(picture().resize((16, 12)), "JPEG"), 0xE1, b"Exif\x00\x00" + gps_block()
    )
    photo = insert_after_soi(saved(picture(), "JPEG"), 0xE0, b"JFXX\x00\x10" + thumbnail)

    clean = metadata.strip_location(photo)

    assert LATITUDE not in clean and b"JFXX" not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize(
    ("entries", "read"),
    [
        ([(0x0112, 4, struct.pack("<I", 6))], 6),  # a LONG, not a SHORT
        ([(0x0112, 3, struct.pack("<HH", 6, 0)), (0x0112, 3, struct.pack("<HH", 3, 0))], 6),
    ],
    ids=["LONG", "twice"],
)
def test_the_orientation_readers_see_is_the_one_kept(entries, read):
    """As Pillow 13 and exiftool read it: a LONG too, and the first of two."""
    ifd0 = struct.pack("<H", len(entries) + 1)
    ifd0 += b"".join(struct.pack("<HHI", tag, kind, 1) + value for tag, kind, value in entries)
    ifd0 += struct.pack("<HHII", 0x8825, 4, 1, 0) + bytes(4)
    photo = insert_after_soi(
        saved(picture(), "JPEG"), 0xE1, b"Exif\x00\x00II*\x00" + struct.pack("<I", 8) + ifd0
    )
    with Image.open(io.BytesIO(photo)) as img:
        assert img.getexif()[0x0112] == read, "the fixture reads otherwise than assumed"

    clean = metadata.strip_location(photo)

    with Image.open(io.BytesIO(clean)) as img:
        assert dict(img.getexif()) == {0x0112: read}


PLACE = b"<x:xmpmeta>GPSLatitude 64.1417N Reykjavik</x:xmpmeta>"


def animated_gif() -> bytes:
    frames = [picture("P"), picture("P").rotate(180)]
    return saved(frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0, duration=70)


def after_first(data: bytes, start: bytes, skip: int, extra: bytes) -> bytes:
    """`data` with `extra` inserted `skip` bytes after the first `start` in it."""
    at = data.index(start) + skip
    return data[:at] + extra + data[at:]


@pytest.mark.parametrize(
    "where",
    ["graphic control", "looping", "between blocks"],
)
def test_nothing_rides_along_in_a_gif_beside_what_it_keeps(where):
    """Found by a re-review: XMP in further sub-blocks of a graphic control or a looping
    extension, or in bytes between blocks that Pillow skips, was kept byte for byte."""
    plain = animated_gif()
    more = bytes([len(PLACE)]) + PLACE  # one more sub-block, before the terminator
    if where == "graphic control":
        photo = after_first(plain, b"\x21\xf9\x04", 3 + 4, more)
    elif where == "looping":
        photo = after_first(plain, b"\x21\xff\x0bNETSCAPE2.0", 14 + 4, more)
    else:
        photo = after_first(plain, b"\x21\xf9\x04", 0, PLACE.replace(b"!", b""))
    assert PLACE[:20] in photo

    clean = metadata.strip_location(photo)

    assert PLACE[:20] not in clean
    assert clean == plain, "what the GIF keeps changed"
    assert pixels_of(clean) == pixels_of(photo)


def test_a_webp_frame_keeps_only_its_image():
    """Found by a re-review: an animation frame's own unknown chunks were kept whole."""
    frames = [picture(), picture().rotate(180)]
    plain = saved(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    frame = plain.index(b"ANMF")
    (size,) = struct.unpack_from("<I", plain, frame + 4)
    extra = b"XMP " + struct.pack("<I", len(PLACE)) + PLACE + b"\x00" * (len(PLACE) & 1)
    grown = plain[: frame + 4] + struct.pack("<I", size + len(extra)) + plain[frame + 8 :]
    at = frame + 8 + size
    photo = grown[:at] + extra + grown[at:]
    photo = photo[:4] + struct.pack("<I", len(photo) - 8) + photo[8:]
    assert pixels_of(photo) == pixels_of(plain), "the fixture is not the same animation"

    clean = metadata.strip_location(photo)

    assert PLACE not in clean and clean[12:] == plain[12:] and clean[4:8] == plain[4:8]
    assert pixels_of(clean) == pixels_of(plain)


def test_a_png_colour_profile_keeps_its_profile_under_a_name_of_no_words():
    """Found by a re-review: the profile's name is any words, and exiftool showed a place."""
    plain = saved(picture(), "PNG", icc_profile=b"\x00" * 128)
    at = plain.index(b"iCCP")
    (size,) = struct.unpack_from(">I", plain, at - 4)
    named_at = plain.index(b"\x00", at + 4)
    body = b"iCCP" + b"Reykjavik 64.14N" + plain[named_at : at + 4 + size]
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    photo = plain[: at - 4] + chunk + plain[at + 4 + size + 4 :]
    with Image.open(io.BytesIO(photo)) as img:
        profile = img.info["icc_profile"]

    clean = metadata.strip_location(photo)

    assert b"Reykjavik" not in clean and clean == plain
    with Image.open(io.BytesIO(clean)) as img:
        assert img.info["icc_profile"] == profile


def test_words_between_a_jpegs_segments_go():
    """Found by a re-review: bytes between segments, which decoders skip (exiftool only
    warns), were kept, and a search of the stored file found the place in them."""
    plain = saved(picture(), "JPEG")
    at = 2 + 2 + int.from_bytes(plain[4:6], "big")  # after JFIF's APP0
    photo = plain[:at] + b"Taken at Reykjavik 64.14N" + plain[at:]
    assert pixels_of(photo) == pixels_of(plain), "decoders do not skip them after all"

    clean = metadata.strip_location(photo)

    assert clean == plain
    assert metadata.strip_location(clean) is clean, "stripped twice is not stripped once"


def two_pictures() -> tuple[bytes, int]:
    """A two-picture MPO as Pillow writes it, and where its index's second entry is."""
    frames = [picture(), picture().rotate(180)]
    data = saved(frames[0], "MPO", save_all=True, append_images=frames[1:])
    segment_at = data.index(b"MPF\x00") - 4
    base = segment_at + 8
    order = "<" if data[base : base + 2] == b"II" else ">"
    (ifd,) = struct.unpack_from(order + "I", data, base + 4)
    (count,) = struct.unpack_from(order + "H", data, base + ifd)
    for entry in range(base + ifd + 2, base + ifd + 2 + 12 * count, 12):
        tag, _kind, _size, offset = struct.unpack_from(order + "HHII", data, entry)
        if tag == 0xB002:
            return data, base + offset + 16
    raise AssertionError("Pillow wrote no picture list")


def test_a_trailer_the_last_pictures_size_reaches_into_goes():
    """Found by a re-review: an index giving the last picture a size past its end kept the
    trailer it reached into whole (exiftool read IPTC and a place in words there)."""
    plain, second = two_pictures()
    order = "<" if b"MPF\x00II" in plain else ">"
    trailer = b"AXS!" + b"Taken at 48.8584N 2.2945E, Paris" + b"AXS!"
    (size,) = struct.unpack_from(order + "I", plain, second + 4)
    photo = bytearray(plain + trailer)
    struct.pack_into(order + "I", photo, second + 4, size + len(trailer))

    clean = metadata.strip_location(bytes(photo))

    assert b"Paris" not in clean and len(clean) == len(plain)
    assert pixels_of(clean) == pixels_of(plain)


def test_one_picture_named_many_times_is_walked_once(monkeypatch):
    """Found by a re-review: an index of 32 lists of 64 entries, one picture under many
    sizes, had its 22 MB scan walked 2,016 times (14 s of one core an index)."""
    plain, second = two_pictures()
    order = "<" if b"MPF\x00II" in plain else ">"
    (size, offset) = struct.unpack_from(order + "II", plain, second + 4)
    photo = bytearray(plain)
    struct.pack_into(order + "II", photo, second + 4, size + 1, offset)  # a second size
    walked = []
    real = jpeg_places._blank_scans
    monkeypatch.setattr(
        jpeg_places, "_blank_scans", lambda out, pos: walked.append(pos) or real(out, pos)
    )
    one_start = [[(100, 100 + n)] for n in range(1, 2017)]  # one picture, 2,016 sizes

    assert mpf.merged(one_start) == [(100, 2116)], "one picture, walked once, to its end"
    assert mpf.merged([[(n, n + 1)] for n in range(65)]) is None, "past 64 pictures in all"
    metadata.strip_location(bytes(photo))
    assert len(walked) == 2, f"{len(walked)} walks of a two-picture file"


def test_a_graphic_control_says_no_more_than_its_four_bytes():
    """Found by a re-review: one sub-block of 255 bytes where a graphic control has 4, the
    rest an XMP packet, was kept."""
    plain = animated_gif()
    at = plain.index(b"\x21\xf9\x04")
    padded = plain[at + 3 : at + 7] + PLACE.ljust(251, b" ")
    photo = plain[:at] + b"\x21\xf9\xff" + padded + plain[at + 7 :]
    assert pixels_of(photo) == pixels_of(plain), "the fixture is not the same animation"

    clean = metadata.strip_location(photo)

    assert PLACE[:20] not in clean and clean == plain


def worded_profile() -> bytes:
    """A real sRGB profile (lcms's) whose description and copyright are words."""
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_a_colour_profile_keeps_its_colours_and_loses_its_words(fmt):
    """Found by a review: a profile's description and copyright are any words (a place, a
    name), which exiftool shows by default. They are emptied in place; the colours stay."""
    profile = worded_profile()
    lossless = {"lossless": True} if fmt == "WEBP" else {}
    photo = saved(picture(), fmt, icc_profile=profile, **lossless)
    assert description(photo) == "sRGB built-in", "the fixture says no words"

    clean = metadata.strip_location(photo)

    assert description(clean) == "", "the profile's words were kept"
    with Image.open(io.BytesIO(clean)) as img:
        assert len(img.info["icc_profile"]) == len(profile)
    assert pixels_of(clean) == pixels_of(photo)


def description(photo: bytes) -> str:
    """The description of `photo`'s colour profile, as lcms reads it (it must read it)."""
    with Image.open(io.BytesIO(photo)) as img:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(img.info["icc_profile"]))
    return str(ImageCms.getProfileDescription(profile)).strip()


def test_a_gifs_colour_profile_goes():
    """Browsers do not read a GIF's profile (nor does Pillow), and its words are any words."""
    plain, profile = b"GIF89a" + saved(picture("P"), "GIF")[6:], worded_profile()
    pieces = [profile[n : n + 255] for n in range(0, len(profile), 255)]
    blocks = b"".join(bytes([len(piece)]) + piece for piece in pieces)
    photo = plain[:-1] + b"\x21\xff\x0bICCRGBG1012" + blocks + b"\x00" + plain[-1:]
    words = "sRGB built-in".encode("utf-16-be")  # as its `mluc` tag holds them
    assert pixels_of(photo) == pixels_of(plain) and words in photo

    clean = metadata.strip_location(photo)

    assert b"ICCRGBG1012" not in clean and words not in clean
    assert clean == plain
