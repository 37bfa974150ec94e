"""What would make a PNG or WebP slow to walk, found before anything walks it: too many chunks.

Both formats are a list of chunks, and both are walked chunk by chunk in Python: by the
location stripping (`studio.metadata`) and, for a PNG, by Pillow, which reads every
chunk through a handler call. A 25 MB PNG of two million empty chunks cost 5 s of CPU
to take in (1.4 s stripping, 3.5 s in Pillow); a WebP, 1.3 s. The chunks are counted
here, stopping one past a bound no encoder comes near: a PNG's image data comes in
chunks of 8 KB or more (about 3,000 for a 25 MB file), an animated one adds two a frame;
a WebP has a handful, and one a frame.
"""

import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_CHUNKS = 100_000
MAX_WEBP_CHUNKS = 10_000
CHUNK_HEAD = 8  # bytes before a chunk's data in both: its length and type (PNG), type and size
PNG_CRC = 4  # bytes after a PNG chunk's data


class TooManyChunks(ValueError):
    """The image has more chunks than any encoder writes: the message says so, for people."""


def check(data: bytes) -> None:
    """Refuse a PNG or WebP with more chunks than the bounds; anything else passes.

    A chunk list that ends early or breaks is left to Pillow, which says it is broken.
    """
    if data.startswith(PNG_SIGNATURE):
        _count_png(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        _count_webp(data)


def _count_png(data: bytes) -> None:
    pos, size = len(PNG_SIGNATURE), len(data)
    for _chunk in range(MAX_PNG_CHUNKS):
        if pos + CHUNK_HEAD > size:
            return
        (length,) = struct.unpack_from(">I", data, pos)
        if data[pos + 4 : pos + 8] == b"IEND":
            return  # whatever follows the end is copied as it is, never walked
        pos += CHUNK_HEAD + length + PNG_CRC
    if pos + CHUNK_HEAD <= size:
        raise TooManyChunks(f"The PNG has more than {MAX_PNG_CHUNKS:,} parts.")


def _count_webp(data: bytes) -> None:
    pos, size = 12, len(data)  # after "RIFF", the size, "WEBP"
    for _chunk in range(MAX_WEBP_CHUNKS):
        if pos + CHUNK_HEAD > size:
            return
        (length,) = struct.unpack_from("<I", data, pos + 4)
        pos += CHUNK_HEAD + length + (length & 1)  # a chunk of odd size is padded to even
    if pos + CHUNK_HEAD <= size:
        raise TooManyChunks(f"The WebP has more than {MAX_WEBP_CHUNKS:,} parts.")
