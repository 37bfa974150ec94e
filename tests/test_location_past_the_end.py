"""Location where a metadata reader looks past what the location stripping walked: after a
picture's end, under an older chunk name, in a GIF comment, in a JPEG's thumbnail.

Found by a review over uvicorn, each read back from the stored original by exiftool: GPS in
a PNG `exIf` chunk (older ImageMagick's name for `eXIf`), in ImageMagick's raw EXIF profile
after a PNG's IEND, in an XMP chunk after a WebP's RIFF container, in a GIF comment, and in
the EXIF of the thumbnail a JPEG's EXIF holds. Bytes after a picture's end (a ZIP, a page)
were stored as they came, where a JPEG's go.
"""

import struct
import time
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from studio import metadata
from tests.location_parts import XMP, gps_exif, gps_of, picture, pixels_of, saved

PLACE = (52.0, 31.0, 12.5)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def plain(fmt: str) -> bytes:
    """A picture with nothing to strip, in `fmt`."""
    if fmt == "GIF":
        frames = [picture("P"), picture("P").rotate(180)]
        return saved(frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0)
    return saved(picture(), fmt)


def raw_exif_profile() -> bytes:
    """ImageMagick's zTXt copy of EXIF, as hex: GPS a reader decodes."""
    exif = gps_exif().tobytes()
    text = b"\nexif\n%d\n" % len(exif) + exif.hex().encode() + b"\n"
    return png_chunk(b"zTXt", b"Raw profile type exif\x00\x00" + zlib.compress(text))


def webp_xmp_chunk() -> bytes:
    return b"XMP " + struct.pack("<I", len(XMP)) + XMP + b"\x00" * (len(XMP) & 1)


AFTER_THE_END = {
    "PNG": raw_exif_profile(),
    "WEBP": webp_xmp_chunk(),
    "GIF": b"<html><script>alert(1)</script></html>",
}


@pytest.mark.parametrize("fmt", sorted(AFTER_THE_END))
def test_what_follows_a_pictures_end_goes(fmt):
    picture_alone = plain(fmt)
    assert metadata.strip_location(picture_alone) == picture_alone  # nothing to strip
    photo = picture_alone + AFTER_THE_END[fmt]

    clean = metadata.strip_location(photo)

    assert clean == picture_alone, f"{len(clean) - len(picture_alone)} bytes kept past the end"
    assert pixels_of(clean) == pixels_of(photo)


@given(fmt=st.sampled_from(sorted(AFTER_THE_END)), tail=st.binary(min_size=1, max_size=300))
def test_no_bytes_after_a_pictures_end_are_kept(fmt, tail):
    picture_alone = plain(fmt)

    assert metadata.strip_location(picture_alone + tail) == picture_alone


def test_a_png_exif_chunk_under_its_older_name_loses_its_place():
    exif = gps_exif().tobytes()[len(b"Exif\x00\x00") :]
    picture_alone = plain("PNG")
    photo = picture_alone[:33] + png_chunk(b"exIf", exif) + picture_alone[33:]  # after IHDR

    clean = metadata.strip_location(photo)

    start = clean.index(b"exIf") + 4
    (length,) = struct.unpack_from(">I", clean, start - 8)
    body, crc = clean[start : start + length], clean[start + length : start + length + 4]
    read = Image.Exif()
    read.load(b"Exif\x00\x00" + body)
    assert dict(read) == {} and b"Pixel 9" not in clean, "EXIF beside the orientation was kept"
    assert struct.unpack(">I", crc)[0] == zlib.crc32(b"exIf" + body)  # a chunk readers accept
    assert pixels_of(clean) == pixels_of(photo)


def test_a_gif_loses_its_comments():
    frames = [picture("P"), picture("P").rotate(180)]
    words = b"Taken at 12 Linden Road, 52.5200 N"
    photo = saved(frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0, comment=words)
    assert words in photo

    clean = metadata.strip_location(photo)

    assert words not in clean
    assert clean == plain("GIF")
    assert pixels_of(clean) == pixels_of(photo)


def exif_with_thumbnail(*thumbnails: bytes) -> bytes:
    """A little-endian EXIF block: IFD0 naming the camera, IFD1 pointing at each of
    `thumbnails` under a thumbnail offset entry of its own (readers follow one of them)."""
    make = b"Pixel 9\x00"
    ifd0 = 8
    ifd1 = ifd0 + 2 + 12 + 4
    entries = 2 * len(thumbnails)
    data = ifd1 + 2 + entries * 12 + 4
    block = b"II*\x00" + struct.pack("<I", ifd0)
    block += struct.pack("<H", 1) + struct.pack("<HHII", 0x0110, 2, len(make), data)
    block += struct.pack("<I", ifd1) + struct.pack("<H", entries)
    at = data + len(make)
    for thumbnail in thumbnails:
        block += struct.pack("<HHII", 0x0201, 4, 1, at)
        block += struct.pack("<HHII", 0x0202, 4, 1, len(thumbnail))
        at += len(thumbnail)
    block += struct.pack("<I", 0) + make + b"".join(thumbnails)
    return b"Exif\x00\x00" + block


@pytest.mark.parametrize("count", [1, 2])
def test_a_jpegs_thumbnails_go_with_the_rest_of_its_exif(count):
    """Found by reviews: a thumbnail's own EXIF held the place again, and of two thumbnail
    offsets exiftool follows the first. EXIF now keeps the orientation alone: the
    thumbnails go with the rest, in place (every offset in the file stays)."""
    thumbnails = [
        saved(picture().resize((16 - 4 * n, 12 - 4 * n)), "JPEG", exif=gps_exif(), xmp=XMP)
        for n in range(count)
    ]
    photo = saved(picture(), "JPEG", exif=exif_with_thumbnail(*thumbnails))
    assert all(gps_of(photo[photo.index(t) :]) for t in thumbnails), "each holds a place"

    clean = metadata.strip_location(photo)

    assert len(clean) == len(photo)
    assert not any(t in clean for t in thumbnails) and b"\xff\xd8" not in clean[2:200]
    assert b"GPSLatitude" not in clean and b"Pixel 9" not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize("claimed", [0x7FFFFFFF, 12 + 8 + 200], ids=["2 GB", "the next chunk"])
def test_what_follows_an_iend_claiming_a_length_goes_too(claimed):
    """Found by a re-review: an IEND claiming a length kept what followed it, an eXIf with
    GPS among it; readers ignore the length."""
    picture_alone = plain("PNG")
    iend = picture_alone[-12:]
    lying = picture_alone[:-12] + struct.pack(">I", claimed) + iend[4:]
    photo = lying + png_chunk(b"eXIf", gps_exif().tobytes()[6:])

    clean = metadata.strip_location(photo)

    assert clean == lying, f"{len(clean) - len(lying)} bytes kept past IEND"


def test_a_thumbnail_of_millions_of_empty_segments_costs_no_more_than_a_plain_one():
    """Found by a re-review: a PNG's EXIF thumbnail of 6.3 million empty segments cost
    3.5 s of CPU to strip. Past a bound no thumbnail comes near, it is zeroed whole."""
    segments = 2_000_000
    thumbnail = b"\xff\xd8" + b"\xff\xe0\x00\x02" * segments + b"\xff\xd9"
    exif = exif_with_thumbnail(thumbnail)[6:]
    picture_alone = plain("PNG")
    photo = picture_alone[:33] + png_chunk(b"eXIf", exif) + picture_alone[33:]

    started = time.process_time()
    clean = metadata.strip_location(photo)
    spent = time.process_time() - started

    assert spent < 0.3, f"{spent:.2f} s of CPU to strip {segments:,} empty segments"
    at = photo.index(thumbnail)
    assert clean[at : at + len(thumbnail)] == bytes(len(thumbnail))  # zeroed in place
    assert pixels_of(clean) == pixels_of(photo)
