"""What the location tests share: small photos with a place in their metadata, and readers."""

import io
import struct

from PIL import Image, PngImagePlugin

XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
    b'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
    b'xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:GPSLatitude="52,31.2083N"/>'
    b"</rdf:RDF></x:xmpmeta>"
)


def picture(mode: str = "RGB") -> Image.Image:
    """A small picture with some detail, so that a changed pixel would show."""
    img = Image.new("RGB", (48, 32), (10, 120, 200))
    for x in range(0, 48, 5):
        img.putpixel((x, x % 32), (255, 255, 0))
    return img.convert(mode) if mode != "RGB" else img


def gps_exif() -> Image.Exif:
    exif = Image.Exif()
    exif[0x0110] = "Pixel 9"
    exif[0x8825] = {1: "N", 2: (52.0, 31.0, 12.5), 3: "E", 4: (13.0, 24.0, 1.0)}
    return exif


def saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


def gps_of(data: bytes) -> dict:
    with Image.open(io.BytesIO(data)) as img:
        img.load()  # PNG text chunks after the image data are read on load
        return dict(img.getexif().get_ifd(0x8825))


def text_of(data: bytes) -> str:
    """Everything Pillow reads as metadata text (PNG text chunks are decompressed)."""
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        return " ".join(str(value) for value in img.info.values())


def pixels_of(data: bytes) -> list[bytes]:
    """The decoded pixels of every frame."""
    frames = []
    with Image.open(io.BytesIO(data)) as img:
        for index in range(getattr(img, "n_frames", 1)):
            img.seek(index)
            frames.append(img.convert("RGBA").tobytes())
    return frames


def png_with(text_chunks: PngImagePlugin.PngInfo) -> bytes:
    return saved(picture(), "PNG", pnginfo=text_chunks)


def add_text(info: PngImagePlugin.PngInfo, chunk: str, key: str, value: str) -> None:
    if chunk == "iTXt":
        info.add_itxt(key, value, zip=True)
    else:
        info.add_text(key, value, zip=chunk == "zTXt")


def insert_after_soi(jpeg: bytes, marker: int, body: bytes) -> bytes:
    """Put a segment (`marker`, `body`) right after the start of image."""
    segment = bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body
    return jpeg[:2] + segment + jpeg[2:]
