"""What would make a PNG, WebP or GIF slow to walk, found before anything walks it: its parts.

A PNG and a WebP are lists of chunks, a GIF a list of blocks each made of sub-blocks of at
most 255 bytes, and all are walked part by part in Python: by the location stripping
(`studio.metadata`) and by Pillow (every PNG chunk through a handler call; a GIF's
extensions, and its frames' data when it counts them). A 25 MB PNG of two million empty
chunks cost 5 s of CPU to take in (1.4 s stripping, 3.5 s in Pillow); a WebP, 1.3 s; a
GIF of one-byte sub-blocks, 2.5 s. The parts are counted here, stopping one past a bound
no encoder comes near: a PNG's image data comes in chunks of 8 KB or more (about 3,000
for a 25 MB file), an animated one adds two a frame; a WebP has a handful, and one a
frame; a GIF's encoder fills its sub-blocks (about 100,000 for 25 MB).
"""

import io
import struct
from typing import BinaryIO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_CHUNKS = 100_000
MAX_WEBP_CHUNKS = 10_000
MAX_GIF_BLOCKS = 300_000  # sub-blocks, the empty one ending each block included
GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
GIF_SCREEN = 13  # bytes: the signature and the logical screen descriptor
GIF_DESCRIPTOR = 10  # bytes: an image descriptor, its separator (0x2C) included
GIF_EXTENSION, GIF_IMAGE_SEPARATOR = 0x21, 0x2C  # the codes that start a block
GIF_TRAILER = 0x3B  # the code that ends the file
CHUNK_HEAD = 8  # bytes before a chunk's data in both: its length and type (PNG), type and size
PNG_CRC = 4  # bytes after a PNG chunk's data


class TooManyChunks(ValueError):
    """The image has more parts than any encoder writes: the message says so, for people."""


def check(data: bytes) -> None:
    """Refuse a PNG, WebP or GIF of more parts than the bounds; anything else passes.

    A list of parts that ends early or breaks is left to Pillow, which says it is broken.
    """
    if data.startswith(PNG_SIGNATURE):
        _count_png(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        _count_webp(data)
    elif data[:6] in GIF_SIGNATURES:
        _count_gif(data)


def _count_png(data: bytes) -> None:
    pos, size = len(PNG_SIGNATURE), len(data)
    for _chunk in range(MAX_PNG_CHUNKS):
        if pos + CHUNK_HEAD > size:
            return
        (length,) = struct.unpack_from(">I", data, pos)
        if data[pos + 4 : pos + 8] == b"IEND":
            return  # whatever follows the end is dropped, never walked
        pos += CHUNK_HEAD + length + PNG_CRC
    if pos + CHUNK_HEAD <= size:
        raise TooManyChunks(f"The PNG has more than {MAX_PNG_CHUNKS:,} parts.")


def png_exif(file: BinaryIO) -> bytes | None:
    """Return the body of a PNG's eXIf chunk, before or after its image data, or None.

    Only the chunks' heads are read, at most MAX_PNG_CHUNKS of them (a stored PNG has no
    more): Pillow decodes the whole image to find one after the image data.
    """
    file.seek(len(PNG_SIGNATURE))
    for _chunk in range(MAX_PNG_CHUNKS):
        head = file.read(CHUNK_HEAD)
        if len(head) < CHUNK_HEAD or head[4:] == b"IEND":
            return None
        (length,) = struct.unpack_from(">I", head)
        if head[4:] == b"eXIf":
            body = file.read(length)
            return body if len(body) == length else None
        file.seek(length + PNG_CRC, io.SEEK_CUR)
    return None


def _count_webp(data: bytes) -> None:
    pos, size = 12, len(data)  # after "RIFF", the size, "WEBP"
    for _chunk in range(MAX_WEBP_CHUNKS):
        if pos + CHUNK_HEAD > size:
            return
        (length,) = struct.unpack_from("<I", data, pos + 4)
        pos += CHUNK_HEAD + length + (length & 1)  # a chunk of odd size is padded to even
    if pos + CHUNK_HEAD <= size:
        raise TooManyChunks(f"The WebP has more than {MAX_WEBP_CHUNKS:,} parts.")


def _count_gif(data: bytes) -> None:
    size = len(data)
    if size < GIF_SCREEN:
        return
    pos = GIF_SCREEN + gif_colour_table_size(data[10])
    blocks = 0
    while pos < size:
        kind = data[pos]
        if kind == GIF_EXTENSION:
            pos += 2  # the introducer and the extension's label
        elif kind == GIF_IMAGE_SEPARATOR:
            if pos + GIF_DESCRIPTOR > size:
                return
            pos += GIF_DESCRIPTOR + gif_colour_table_size(data[pos + 9]) + 1  # + LZW code size
        elif kind == GIF_TRAILER:
            return
        else:
            # Pillow skips a byte that starts no block and reads on: so does the count
            # (a review put one before millions of sub-blocks, and the count had stopped
            # there), and each such byte is a part, since Pillow walks them one by one.
            pos += 1
            blocks += 1
            if blocks > MAX_GIF_BLOCKS:
                raise TooManyChunks(f"The GIF has more than {MAX_GIF_BLOCKS:,} parts.")
            continue
        while pos < size:
            length = data[pos]
            pos += 1 + length
            blocks += 1
            if blocks > MAX_GIF_BLOCKS:
                raise TooManyChunks(f"The GIF has more than {MAX_GIF_BLOCKS:,} parts.")
            if length == 0:
                break


def gif_colour_table_size(flags: int) -> int:
    """Return the size in bytes of the colour table that a GIF descriptor's `flags` announce."""
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0
