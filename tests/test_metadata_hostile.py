"""Location hidden where a simple stripper does not look, and files built to make it slow.

Each photo here carries a GPS location in one of the less common forms (EXIF as hex text
in a PNG, XMP in a PNG tEXt/zTXt chunk, JPEG Extended XMP, GIF XMP, IPTC place names);
stripping must remove it and leave the decoded pixels exactly as they were.
"""

import binascii
import io
import struct
import time

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from PIL import Image, PngImagePlugin

from studio import metadata
from tests.hostile import png_chunk
from tests.location_parts import (
    XMP,
    add_text,
    gps_exif,
    gps_of,
    insert_after_soi,
    picture,
    pixels_of,
    png_with,
    saved,
    text_of,
)

XMP_EXTENSION = b"http://ns.adobe.com/xmp/extension/\x00"
# GIF XMP ends with a "magic trailer" that brings any sub-block walk to its terminator.
GIF_MAGIC_TRAILER = bytes([1, *range(255, -1, -1), 0])
SIGNATURES = [b"\xff\xd8", b"\x89PNG\r\n\x1a\n", b"RIFF\x00\x00\x00\x00WEBP", b"GIF89a"]


def gps_of_every_frame(data: bytes) -> list[dict]:
    gps = []
    with Image.open(io.BytesIO(data)) as img:
        for index in range(getattr(img, "n_frames", 1)):
            img.seek(index)  # a multi-picture JPEG reads each frame's own EXIF here
            gps.append(dict(img.getexif().get_ifd(0x8825)))
    return gps


def raw_profile(name: str, payload: bytes) -> str:
    """A payload as ImageMagick writes it into a PNG text chunk: name, length, hex lines."""
    hexed = binascii.hexlify(payload).decode()
    lines = [hexed[i : i + 72] for i in range(0, len(hexed), 72)]
    return f"\n{name}\n{len(payload):8d}\n" + "\n".join(lines) + "\n"


def insert_before_iend(png: bytes, chunk: bytes) -> bytes:
    iend = png.rindex(b"IEND") - 4
    return png[:iend] + chunk + png[iend:]


def gps_cut_short() -> bytes:
    """A little-endian TIFF block whose GPS directory claims three entries but holds two."""
    ifd0 = struct.pack("<H", 1) + struct.pack("<HHII", 0x8825, 4, 1, 26) + bytes(4)
    gps = struct.pack("<H", 3)
    gps += struct.pack("<HHI", 1, 2, 2) + b"N\x00\x00\x00"  # latitude reference: north
    gps += struct.pack("<HHI", 3, 2, 2) + b"E\x00\x00\x00"  # longitude reference: east
    return b"II*\x00" + struct.pack("<I", 8) + ifd0 + gps


def gif_blocks_start(gif: bytes) -> int:
    """Where the first block after the header and global colour table begins."""
    flags = gif[10]
    return 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)


def gif_xmp(trailer: bytes = GIF_MAGIC_TRAILER) -> bytes:
    """An XMP application extension as Adobe writes it: the packet, then the magic trailer."""
    return b"\x21\xff\x0bXMP DataXMP" + XMP + trailer


def an_animated_gif() -> bytes:
    frames = [picture("P"), picture("P").rotate(180)]
    return saved(frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0)


# --- PNG ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", ["tEXt", "zTXt", "iTXt"])
def test_it_drops_exif_kept_as_a_hex_raw_profile_in_a_png(chunk):
    info = PngImagePlugin.PngInfo()
    tiff = gps_exif().tobytes()
    add_text(info, chunk, "Raw profile type exif", raw_profile("exif", b"Exif\x00\x00" + tiff))
    photo = png_with(info)
    assert gps_of(photo)  # Pillow reads the hex profile as the image's EXIF

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {}
    assert b"Raw profile type exif" not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize("name", ["APP1", "xmp", "iptc", "8bim"])
def test_it_drops_the_other_raw_profiles_that_can_hold_a_location(name):
    info = PngImagePlugin.PngInfo()
    info.add_text(f"Raw profile type {name}", raw_profile(name, XMP))
    photo = png_with(info)
    hexed = binascii.hexlify(b"GPSLatitude")
    assert hexed in photo

    clean = metadata.strip_location(photo)

    assert hexed not in clean and b"Raw profile type" not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize("chunk", ["tEXt", "zTXt"])
def test_it_drops_an_xmp_packet_kept_in_a_png_text_chunk(chunk):
    info = PngImagePlugin.PngInfo()
    add_text(info, chunk, "XML:com.adobe.xmp", XMP.decode())
    photo = png_with(info)
    assert "GPSLatitude" in text_of(photo)

    clean = metadata.strip_location(photo)

    assert "GPSLatitude" not in text_of(clean) and b"GPSLatitude" not in clean
    assert b"XML:com.adobe.xmp" not in clean
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")
def test_it_empties_a_gps_directory_whose_entries_run_past_the_end_of_the_block():
    photo = insert_before_iend(saved(picture(), "PNG"), png_chunk(b"eXIf", gps_cut_short()))
    assert gps_of(photo)  # Pillow reads the entries there are

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {}
    assert pixels_of(clean) == pixels_of(photo)


def test_it_keeps_every_other_png_chunk_byte_for_byte():
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "dropped")
    info.add_text("XML:com.adobe.xmp", XMP.decode(), zip=True)
    plain = saved(picture(), "PNG", icc_profile=b"\x00" * 128)
    photo = saved(picture(), "PNG", icc_profile=b"\x00" * 128, pnginfo=info)

    assert metadata.strip_location(photo) == plain


# --- JPEG --------------------------------------------------------------------------------


def test_it_drops_extended_xmp_from_a_jpeg():
    plain = saved(picture(), "JPEG", quality=90)
    body = XMP_EXTENSION + b"0" * 32 + struct.pack(">II", len(XMP), 0) + XMP
    photo = insert_after_soi(plain, 0xE1, body)
    assert b"GPSLatitude" in photo

    clean = metadata.strip_location(photo)

    assert clean == plain  # the segment gone, everything else byte for byte
    assert pixels_of(clean) == pixels_of(photo)


def test_it_drops_iptc_place_names_from_a_jpeg():
    # Photoshop's APP13: an 8BIM resource 0x0404 holding IPTC records; 2:90 is the city.
    city = b"\x1c\x02\x5a" + struct.pack(">H", 6) + b"Berlin"
    resource = b"8BIM\x04\x04\x00\x00" + struct.pack(">I", len(city)) + city
    plain = saved(picture(), "JPEG", quality=90)
    photo = insert_after_soi(plain, 0xED, b"Photoshop 3.0\x00" + resource)

    clean = metadata.strip_location(photo)

    assert clean == plain
    assert pixels_of(clean) == pixels_of(photo)


def test_it_skips_megabytes_of_jpeg_fill_bytes_quickly_and_keeps_them():
    data = b"\xff\xd8" + b"\xff" * (24 * 1024 * 1024)

    started = time.perf_counter()
    clean = metadata.strip_location(data)
    seconds = time.perf_counter() - started

    assert seconds < 0.5, f"took {seconds:.2f} s (bound 0.5 s)"
    assert clean == data


def test_it_strips_a_photo_after_megabytes_of_fill_bytes_quickly():
    plain = saved(picture(), "JPEG", quality=90, exif=gps_exif())
    fill = b"\xff" * (24 * 1024 * 1024)

    started = time.perf_counter()
    clean = metadata.strip_location(plain[:2] + fill + plain[2:])
    seconds = time.perf_counter() - started

    assert seconds < 0.5, f"took {seconds:.2f} s (bound 0.5 s)"
    assert clean == plain[:2] + fill + metadata.strip_location(plain)[2:]


@settings(max_examples=40, deadline=None)
@given(run=st.integers(0, 3 * 65536 + 2) | st.sampled_from([65535, 65536, 65537, 131072]))
def test_a_run_of_fill_bytes_of_any_length_is_kept_and_the_exif_after_it_found(run):
    # Long runs are compared a 64 KiB block at a time: the run's end may fall anywhere.
    # The run pads the EXIF segment's marker: a walk that lands past it misses the EXIF.
    plain = saved(picture(), "JPEG", quality=90, exif=gps_exif())
    app0_end = 4 + struct.unpack_from(">H", plain, 4)[0]  # the JFIF segment comes first
    assert plain[app0_end : app0_end + 2] == b"\xff\xe1"
    photo = plain[:app0_end] + b"\xff" * run + plain[app0_end:]
    assert gps_of(photo)

    clean = metadata.strip_location(photo)

    stripped = metadata.strip_location(plain)
    assert clean == stripped[:app0_end] + b"\xff" * run + stripped[app0_end:]
    assert gps_of(clean) == {}
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize(
    "between",
    [b"junk", b"\xff\x00", b"\xff\xd0", b"\xff\xe0\x00\x00"],
    ids=["stray bytes", "an escaped 0xFF", "a restart marker", "a length too short"],
)
def test_it_finds_the_exif_after_odd_bytes_between_segments_as_pillow_does(between):
    # Pillow and libjpeg read past these to the next marker: the EXIF after them counts.
    plain = saved(picture(), "JPEG", quality=90, exif=gps_exif())
    app0_end = 4 + struct.unpack_from(">H", plain, 4)[0]  # the JFIF segment comes first
    photo = plain[:app0_end] + between + plain[app0_end:]
    assert gps_of(photo)

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {}
    assert pixels_of(clean) == pixels_of(photo)


@pytest.mark.parametrize("xmp", [False, True], ids=["EXIF", "EXIF and XMP"])
def test_it_strips_every_image_of_a_multi_picture_jpeg_in_place(xmp):
    # Phones write MPO files: further JPEGs after the first, found through an offset index.
    frames = [picture(), picture().rotate(180)]
    extra = {"xmp": XMP} if xmp else {}
    photo = saved(
        frames[0], "MPO", save_all=True, append_images=frames[1:], exif=gps_exif(), **extra
    )
    assert gps_of_every_frame(photo)[1]

    clean = metadata.strip_location(photo)

    assert gps_of_every_frame(clean) == [{}, {}] and b"GPSLatitude" not in clean
    assert len(clean) == len(photo)  # nothing moved: the index still points right
    assert pixels_of(clean) == pixels_of(photo)


# --- WebP --------------------------------------------------------------------------------


def test_it_keeps_a_webp_with_bytes_after_its_riff_container_decodable():
    plain = saved(picture(), "WEBP", exif=gps_exif(), xmp=XMP)
    photo = plain + b"JUNK" + struct.pack("<I", 1000) + b"appended by some tool"
    assert gps_of(photo)

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {} and b"GPSLatitude" not in clean
    assert pixels_of(clean) == pixels_of(photo)
    assert b"appended by some tool" not in clean  # what follows the container goes


# --- GIF ---------------------------------------------------------------------------------


def test_it_drops_xmp_from_a_gif_and_keeps_every_other_block():
    plain = an_animated_gif()
    start = gif_blocks_start(plain)
    photo = plain[:start] + gif_xmp() + plain[start:]
    assert b"GPSLatitude" in photo

    clean = metadata.strip_location(photo)

    assert clean == plain
    assert pixels_of(clean) == pixels_of(photo)


def test_it_drops_gif_xmp_whose_trailer_runs_to_the_end_of_the_file():
    # One byte short of the magic trailer: a sub-block walk runs into the end of the file,
    # which Pillow (and browsers) accept, so the packet must still go.
    plain = an_animated_gif()
    photo = plain[:-1] + gif_xmp(GIF_MAGIC_TRAILER[:-1]) + b"\x3b"
    assert pixels_of(photo) == pixels_of(plain)

    clean = metadata.strip_location(photo)

    assert clean == plain
    assert pixels_of(clean) == pixels_of(photo)


def test_it_walks_past_a_stray_byte_between_gif_blocks_as_pillow_does():
    plain = an_animated_gif()
    start = gif_blocks_start(plain)
    photo = plain[:start] + b"\x00" + gif_xmp() + plain[start:]
    assert pixels_of(photo) == pixels_of(plain)

    clean = metadata.strip_location(photo)

    assert b"GPSLatitude" not in clean
    assert pixels_of(clean) == pixels_of(photo)


def test_it_leaves_a_gif_it_cannot_walk_as_it_is():
    # The screen descriptor announces a 768-byte colour table; the file ends before it does.
    data = b"GIF89a\x10\x00\x10\x00\x87\x00\x00" + gif_xmp()

    assert metadata.strip_location(data) == data


# --- any bytes ---------------------------------------------------------------------------


def small_files() -> list[bytes]:
    """Real files carrying location in each form, for the fuzzer to damage."""
    jpeg = saved(picture(), "JPEG", exif=gps_exif(), xmp=XMP)
    info = PngImagePlugin.PngInfo()
    info.add_text("XML:com.adobe.xmp", XMP.decode())
    png = saved(picture(), "PNG", exif=gps_exif(), pnginfo=info)
    webp = saved(picture(), "WEBP", exif=gps_exif(), xmp=XMP)
    gif = an_animated_gif()
    mpo = saved(picture(), "MPO", save_all=True, append_images=[picture()], exif=gps_exif())
    return [jpeg, png, webp, gif[:-1] + gif_xmp() + b"\x3b", mpo]


@settings(max_examples=200, deadline=None)
@given(signature=st.sampled_from(SIGNATURES), rest=st.binary(max_size=512))
def test_it_never_fails_or_lingers_on_bytes_after_a_signature(signature, rest):
    started = time.perf_counter()
    clean = metadata.strip_location(signature + rest)

    assert isinstance(clean, bytes)
    assert time.perf_counter() - started < 0.5


def decoded(data: bytes) -> tuple[list[bytes], list[dict]] | None:
    """The pixels and GPS directories of every frame Pillow reads, or None if it cannot."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.width * img.height > 10_000:
                return None  # a damaged size field; the store refuses such sizes anyway
        return pixels_of(data), gps_of_every_frame(data)
    except Exception:  # Pillow raises many types on damaged files
        return None


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's notes on damaged EXIF
@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    original=st.sampled_from(small_files()),
    patch=st.binary(min_size=1, max_size=8),
)
def test_a_damaged_real_file_that_decodes_keeps_its_pixels_and_loses_its_location(
    data, original, patch
):
    at = data.draw(st.integers(0, len(original)))
    cut = data.draw(st.sampled_from([len(original)]) | st.integers(at, len(original)))
    damaged = original[:at] + patch + original[at + len(patch) : cut]

    started = time.perf_counter()
    clean = metadata.strip_location(damaged)

    assert time.perf_counter() - started < 0.5
    before = decoded(damaged)
    event("still decodes" if before is not None else "no longer decodes")
    if before is not None:
        pixels, _gps = before
        assert decoded(clean) == (pixels, [{}] * len(pixels))


# --- GPS pointers a reader takes another way ------------------------------------------


def gps_directory(order: str, at: int) -> bytes:
    """A GPS directory at offset `at`: latitude reference north, latitude 48° 51' 30"."""
    data_at = at + 2 + 12 * 2 + 4
    directory = struct.pack(order + "H", 2)
    directory += struct.pack(order + "HHI", 1, 2, 2) + b"N\x00\x00\x00"
    directory += struct.pack(order + "HHII", 2, 5, 3, data_at)
    return directory + bytes(4) + struct.pack(order + "6I", 48, 1, 51, 1, 30, 1)


def tiff_pointing(order: str, pointers: list[tuple[int, int]]) -> bytes:
    """A TIFF block whose first directory holds GPS entries of (type, value); the real GPS
    directory follows it, and a value of -1 stands for its offset."""
    first = struct.pack(order + "H", len(pointers))
    gps_at = 8 + 2 + 12 * len(pointers) + 4
    for kind, value in pointers:
        value = gps_at if value < 0 else value
        field = (
            struct.pack(order + "HH", value, 0) if kind == 3 else struct.pack(order + "I", value)
        )
        first += struct.pack(order + "HHI", 0x8825, kind, 1) + field
    head = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8)
    return head + first + bytes(4) + gps_directory(order, gps_at)


def carrying(fmt: str, tiff: bytes) -> bytes:
    if fmt == "PNG":  # after the image data, where Pillow reads it on load
        return insert_before_iend(saved(picture(), "PNG"), png_chunk(b"eXIf", tiff))
    extra = {"lossless": True} if fmt == "WEBP" else {}
    return saved(picture(), fmt, exif=b"Exif\x00\x00" + tiff, **extra)


POINTERS = {
    # Typed SHORT: the offset is in the field's first two bytes, as Pillow reads it.
    "a SHORT pointer": [(3, -1)],
    # Two GPS entries, the first into the TIFF header: the reader takes the other.
    "a broken pointer, then a good one": [(4, 2), (4, -1)],
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's notes on the odd directories
@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("pointers", list(POINTERS))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_it_empties_the_gps_directory_a_reader_finds_however_it_is_pointed_at(fmt, pointers, order):
    """Found by a second review: the stripper read these pointers otherwise than Pillow."""
    photo = carrying(fmt, tiff_pointing(order, POINTERS[pointers]))
    assert gps_of(photo).get(1) == "N"

    clean = metadata.strip_location(photo)

    assert gps_of(clean) == {}
    assert pixels_of(clean) == pixels_of(photo)


def test_a_jpeg_whose_end_marker_became_a_segment_still_decodes_once_stripped():
    """Found by the fuzzer above: the end marker's last byte written over made an empty
    APP0 after the last scan; cut out, nothing ended that scan and the file no longer
    decoded. A picture without its end marker is blanked in place instead."""
    jpeg_file = small_files()[0]
    assert jpeg_file.endswith(b"\xff\xd9")
    damaged = jpeg_file[:-1] + b"\xe0\x00\x00"
    before = decoded(damaged)
    assert before is not None, "Pillow reads the damaged file"

    clean = metadata.strip_location(damaged)

    assert decoded(clean) == (before[0], [{}] * len(before[0]))
