"""An original's size as shown (turned by its EXIF Orientation), read without its pixels.

Found by a hostile-files review over uvicorn: the image page asked Pillow for a PNG's EXIF,
and Pillow decodes a whole PNG to look for an eXIf chunk after its image data. A 116 KB
PNG of 6320 x 6320 cost 0.35 s of CPU and some 150 MB a view, outside the bound on decodes
at once: 32 views at once took the web process to 4.7 GB.
"""

import io
import struct

import pytest
from django.test import Client
from PIL import Image, ImageFile

from studio import engine, originals, thumbs

ORIENTATION = 0x0112


def png_chunks(data: bytes) -> list[bytes]:
    """Split a PNG after its signature into its chunks, each whole (length to CRC)."""
    found, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        found.append(data[pos : pos + 12 + length])
        pos += 12 + length
    return found


def png_turned(orientation: int, *, after_data: bool) -> bytes:
    """Return a 400 x 200 PNG with an EXIF Orientation, its eXIf chunk before or after its
    image data (the PNG standard allows either; Pillow writes it before)."""
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    out = io.BytesIO()
    Image.new("RGB", (400, 200), (0, 0, 255)).save(out, "PNG", exif=exif)
    data = out.getvalue()
    if not after_data:
        return data
    chunks = png_chunks(data)
    [exif_chunk] = [c for c in chunks if c[4:8] == b"eXIf"]
    rest = [c for c in chunks if c is not exif_chunk]
    return data[:8] + b"".join(rest[:-1]) + exif_chunk + rest[-1]  # just before IEND


def flat_png(side: int = 6320) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (side, side)).save(out, "PNG", compress_level=9)
    return out.getvalue()


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each image Pillow decodes (its pixels loaded) while the test runs."""
    seen: list[str] = []
    load = ImageFile.ImageFile.load

    def counted(img: ImageFile.ImageFile):  # type: ignore[no-untyped-def]
        seen.append(f"{img.format} {img.size}")
        return load(img)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted)
    return seen


@pytest.mark.parametrize("after_data", [False, True], ids=["eXIf first", "eXIf last"])
@pytest.mark.parametrize(("orientation", "turned"), [(1, False), (6, True), (8, True)])
def test_a_pngs_orientation_is_read_wherever_its_exif_is(data_dir, after_data, orientation, turned):
    original = originals.save(png_turned(orientation, after_data=after_data))

    assert thumbs.turned(original.sha256, original.info.mime) is turned


def test_the_orientation_of_a_large_png_is_read_without_its_pixels(data_dir, loads):
    data = flat_png()
    original = originals.save(data)
    loads.clear()  # saving decodes it once, by design

    assert thumbs.turned(original.sha256, original.info.mime) is False
    assert loads == [], f"a {len(data) / 1000:.0f} KB PNG was decoded to read its orientation"


def test_the_image_page_decodes_no_picture(signed_in: Client, subject, loads):
    photo = engine.add_reference(subject=subject, data=flat_png(), file_name="flat.png")
    loads.clear()

    page = signed_in.get(f"/assets/{photo.pk}/")

    assert page.status_code == 200
    assert "6320 \u00d7 6320 px" in page.content.decode()
    assert loads == [], f"the page decoded {loads}"
