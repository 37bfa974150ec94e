"""Stripping an upload's location costs time bounded by its size, and never fails on a
container it cannot change; found by a review of hostile files over uvicorn."""

import io
import struct
import time
import zlib

import pytest
from PIL import Image

from studio import metadata, tiff_places
from tests.hostile import png_chunk

BOUND = 2.0  # seconds for a 1.6 MB block; the stripping itself takes about 0.1 s here


def overlapping_gps(directories: int) -> bytes:
    """A TIFF block whose first directory has `directories` GPS pointers 2 bytes apart, the
    highest first, into a run of 0xFF: each reads as a full directory of 65,535 entries,
    and emptying one never empties the next one's count."""
    base = 8 + 2 + 12 * directories + 4
    pointers = b"".join(
        struct.pack("<HHII", 0x8825, 4, 1, base + 2 * (directories - 1 - n))
        for n in range(directories)
    )
    ifd0 = struct.pack("<H", directories) + pointers + b"\0" * 4
    return b"II*\0" + struct.pack("<I", 8) + ifd0 + b"\xff" * (2 * directories + 12 * 65535 + 16)


def png_with_exif(tiff: bytes) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (20, 90, 160)).save(out, "PNG")
    plain = out.getvalue()
    return plain[:33] + png_chunk(b"eXIf", tiff) + plain[33:]


def test_overlapping_gps_directories_are_emptied_in_time_bounded_by_the_block():
    """The review's 1.6 MB PNG: 65,535 such pointers took about 24 minutes of one core."""
    data = png_with_exif(overlapping_gps(65535))

    started = time.perf_counter()
    stripped = metadata.strip_location(data)
    seconds = time.perf_counter() - started

    assert seconds < BOUND, f"{len(data):,} bytes stripped in {seconds:.1f} s (bound {BOUND} s)"
    with Image.open(io.BytesIO(stripped)) as img:
        img.load()
        assert dict(img.getexif()) == {}, "EXIF entries were kept"
        assert img.size == (64, 64)


@pytest.mark.parametrize("directories", [1, 2, 7])
def test_a_block_of_overlapping_gps_directories_keeps_no_entry(directories):
    block = bytearray(overlapping_gps(directories))
    size = len(block)

    assert tiff_places.keep_orientation(block)

    assert len(block) == size, "the block is cut down in place"
    assert block[:14] == b"II*\0" + struct.pack("<IHI", 8, 0, 0), "IFD0 is not empty"
    assert not any(block[14:]), "bytes past the empty IFD0 were kept"


def test_an_empty_vp8x_before_an_xmp_chunk_is_left_for_the_decoder_to_refuse():
    """Found by the review: a 32-byte WebP, an empty VP8X then an XMP chunk, made the
    upload a 500 (IndexError) instead of the decoder's 400."""
    body = b"VP8X" + struct.pack("<I", 0) + b"XMP " + struct.pack("<I", 4) + b"abcd"
    data = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body

    stripped = metadata.strip_location(data)

    assert b"XMP " not in stripped
    assert stripped.startswith(b"RIFF") and stripped[8:16] == b"WEBPVP8X"


def test_a_png_of_many_colour_profiles_costs_one_profile():
    """A PNG has one profile, each of which is inflated to empty its words: 2,000 chunks of
    4 MB profiles (4 KB each, packed) would cost seconds each time it is stripped."""
    packed = zlib.compress(bytes(4 << 20))
    profile = png_chunk(b"iCCP", b"ICC Profile\x00\x00" + packed)
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (20, 90, 160)).save(out, "PNG")
    plain = out.getvalue()
    data = plain[:33] + profile * 2000 + plain[33:]

    started = time.perf_counter()
    stripped = metadata.strip_location(data)
    seconds = time.perf_counter() - started

    assert seconds < 1.0, f"{len(data):,} bytes stripped in {seconds:.2f} s (bound 1 s)"
    assert stripped.count(b"iCCP") == 1, "a second profile was kept"
