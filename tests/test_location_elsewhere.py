"""Location kept where a reader looks and Pillow does not: under an EXIF header Pillow
ignores, in a JPEG comment, in PNG text chunks of any keyword (studio/metadata.py).

Found by a review over uvicorn: GPS under an `Exif\\0\\xff` header was stored, served
by the API and sent to Ember as it came, and an ImageMagick `exif:GPSLatitude` text chunk
stayed in a PNG.
"""

import struct

import pytest
from PIL import PngImagePlugin

from studio import metadata
from tests.location_parts import (
    XMP,
    add_text,
    gps_exif,
    insert_after_soi,
    picture,
    pixels_of,
    png_with,
    saved,
    text_of,
)


@pytest.mark.parametrize("chunk", ["tEXt", "zTXt", "iTXt"])
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("exif:GPSLatitude", "52/1, 31/1, 125/10"),  # ImageMagick writes properties so (a review)
        ("Comment", "Taken at 12 Linden Road"),
        ("Location", "52.5200 N, 13.4050 E"),
    ],
)
def test_it_drops_every_png_text_chunk_whatever_its_keyword(chunk, key, value):
    """Found by a review: an `exif:GPSLatitude` text chunk was stored as it came. Any
    keyword can carry a place in words a reader shows: no text chunk is kept."""
    info = PngImagePlugin.PngInfo()
    add_text(info, chunk, key, value)
    photo, plain = png_with(info), png_with(PngImagePlugin.PngInfo())
    assert value in text_of(photo)

    clean = metadata.strip_location(photo)

    assert clean == plain  # the chunk gone, every other chunk byte for byte
    assert value.encode() not in clean


def exif_segment(header: bytes) -> bytes:
    """An APP1 body: `header`, then a TIFF block holding a GPS directory."""
    return header + gps_exif().tobytes()


@pytest.mark.parametrize(
    "body",
    [
        exif_segment(b"Exif\x00\xff"),  # a review's: Adobe's XMP Toolkit reads it so
        exif_segment(b"Exif\x00"),  # one zero byte, as some writers leave it
        exif_segment(b"Exif"),  # ffmpeg matches on these four bytes only
        b"http://ns.adobe.com/xap/1.0/ \x00" + XMP,  # a stray space after the namespace
        b"XMP\x00" + XMP,  # no namespace at all
    ],
    ids=["Exif-0-ff", "Exif-0", "Exif", "xmp-space", "xmp-bare"],
)
def test_it_drops_every_app1_but_a_standard_exif_block(body):
    """Found by a review: GPS under an `Exif\\0\\xff` header, which Pillow ignores and other
    readers take, was stored, served and sent to Ember as it came."""
    plain = saved(picture(), "JPEG", quality=90)
    photo = insert_after_soi(plain, 0xE1, body)

    clean = metadata.strip_location(photo)

    assert clean == plain
    assert pixels_of(clean) == pixels_of(photo)


def test_it_drops_a_jpeg_comment_holding_an_xmp_packet():
    plain = saved(picture(), "JPEG", quality=90)
    photo = insert_after_soi(plain, 0xFE, XMP)

    clean = metadata.strip_location(photo)

    assert clean == plain and b"GPSLatitude" not in clean


def test_it_blanks_a_non_standard_exif_header_in_a_later_picture_of_an_mpo_in_place():
    frames = [picture(), picture().rotate(180)]
    photo = bytearray(saved(frames[0], "MPO", save_all=True, append_images=frames[1:]))
    later = photo.index(b"\xff\xd8", 2)  # the second picture's start of image
    photo[later + 2 : later + 2] = b"\xff\xe1" + struct.pack(">H", 2 + 128) + b"Exif\x00\xff"
    photo[later + 2 + 10 : later + 2 + 10] = b"GPSLatitude" + bytes(128 - 6 - 11)
    photo = bytes(photo)

    clean = metadata.strip_location(photo)

    assert b"GPSLatitude" not in clean and len(clean) == len(photo)
