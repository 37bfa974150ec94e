"""Hostile image files built byte by byte: small on disk, enormous to decode."""

import io
import struct

from PIL import Image


def many_frame_gif(width: int = 6000, height: int = 6000, frames: int = 1000) -> bytes:
    """Return a GIF of `frames` one-pixel frames on a `width` x `height` canvas (~23 KB).

    Every frame decodes onto the whole canvas: 1,000 frames of 6000 x 6000 would be 36
    billion pixels to decode from a file a few kilobytes long.
    """
    out = io.BytesIO()
    out.write(b"GIF89a")
    out.write(struct.pack("<HHBBB", width, height, 0x80, 0, 0))  # a 2-colour global table
    out.write(b"\x00\x00\x00\xff\xff\xff")
    for index in range(frames):
        out.write(b"\x21\xf9\x04\x08\x01\x00\x00\x00")  # graphic control: 1/100 s, dispose
        out.write(b"\x2c" + struct.pack("<HHHHB", index % width, 0, 1, 1, 0))
        out.write(b"\x02\x02\x4c\x01\x00")  # LZW minimum code size 2, one pixel, end
    out.write(b"\x3b")
    return out.getvalue()


def animated(fmt: str, frames: int, size: tuple[int, int] = (8, 8)) -> bytes:
    """Return a real animation (APNG, animated WebP or GIF) with distinct frames."""
    images = [
        Image.new("RGB", size, (index % 256, (index * 7) % 256, 99)) for index in range(frames)
    ]
    out = io.BytesIO()
    images[0].save(out, fmt, save_all=True, append_images=images[1:], duration=40, loop=0)
    return out.getvalue()
