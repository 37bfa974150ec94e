"""Strip location data from uploaded photos, losslessly: the pixels are never re-encoded.

A phone photo carries where it was taken in its EXIF GPS directory and often again in an
XMP packet; editors add place names (IPTC) and ImageMagick copies EXIF and XMP into PNG
text chunks as hex. Reference photos are shown to everyone in the studio and sent to
Ember, so uploads lose all of these before they are hashed and stored:

- JPEG (studio/jpeg_places.py): the GPS directory of its EXIF is emptied in place (and
  every other directory's GPS pointer followed, and the XMP, IPTC or Photoshop block an
  EXIF tag may hold blanked: studio/tiff_places.py), so every other offset in the block
  stays valid and orientation, camera and date survive; every further EXIF block, every
  other APP1 (XMP, and EXIF under a header Pillow ignores), every comment and every
  application segment that says nothing about the pixels go, before the first scan and
  between scans, and so does what follows the picture (a motion photo's video). In a
  multi-picture file nothing before its last picture moves: there what goes is blanked in
  place, and each picture its index names is looked at as the first;
- PNG: the GPS directory of `eXIf` (or `exIf`, as older ImageMagick named it) is emptied
  in place (its CRC recomputed); every text chunk (tEXt, zTXt, iTXt) is dropped whole:
  they hold XMP packets, ImageMagick's "Raw profile type" copies of EXIF, XMP, IPTC or
  Photoshop resources and its `exif:GPS…` properties, or any words at all, which a reader
  may show;
- WebP: the GPS directory of the `EXIF` chunk is emptied in place; the `XMP ` chunk is
  dropped whole;
- GIF: the XMP application extension ("XMP DataXMP") and every comment are dropped whole.

Whatever follows the picture's end (a PNG's IEND, the WebP's RIFF container, a GIF's
trailer) goes too, as it does after a JPEG's: no decoder reads it, and readers of metadata
do (a review's GPS after IEND and XMP after the RIFF were shown by exiftool), as may
anything else (a ZIP or a page riding along).

Everything else, compressed image data included, is copied byte for byte (a JPEG's
0xFF fill bytes too). Each container is walked as Pillow reads it, stray bytes between
JPEG segments or GIF blocks skipped as Pillow skips them, so that what Pillow finds in a
stored file has been looked at here; a block too broken to walk is left as it is, for
the decoder that checks every upload to refuse.
"""

import re
import struct
import zlib

from studio.chunks import (
    GIF_DESCRIPTOR,
    GIF_EXTENSION,
    GIF_IMAGE_SEPARATOR,
    GIF_SCREEN,
    GIF_SIGNATURES,
    PNG_SIGNATURE,
    gif_colour_table_size,
)
from studio.jpeg_places import strip_jpeg
from studio.splice import Splice
from studio.tiff_places import empty_gps

EXIF_HEADER = b"Exif\x00\x00"

# Text chunks are dropped whole; ICC profiles stay: they carry no place and viewers use them.
PNG_TEXT_CHUNKS = {b"tEXt", b"zTXt", b"iTXt"}
PNG_EXIF = b"exif"  # the chunk's type, whatever its letters' case: `exIf` was ImageMagick's

GIF_TRAILER = 0x3B
GIF_XMP_ID = b"XMP DataXMP"  # application identifier and authentication code
GIF_XMP = b"\xff\x0b" + GIF_XMP_ID  # after the introducer: label, block size, identifier
COMMENT = b"\xfe"  # after the introducer, the label of a comment: words a reader shows
GIF_BLOCK = re.compile(rb"[\x21\x2c\x3b]")


def strip_location(data: bytes) -> bytes:
    """Return `data` without location metadata; bytes of other kinds are returned as they are.

    `data` has passed `originals.precheck`, which bounds the walks. jpeg.BadJpeg when a
    further picture of a multi-picture JPEG would cost too much to walk.
    """
    if data.startswith(b"\xff\xd8"):
        return strip_jpeg(data)
    if data.startswith(PNG_SIGNATURE):
        return _png(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:6] in GIF_SIGNATURES:
        return _gif(data)
    return data


# --- PNG ---------------------------------------------------------------------------------


def _png(data: bytes) -> bytes:
    """Walk the chunks up to IEND; whatever follows it goes."""
    kept = Splice(data)
    pos = len(PNG_SIGNATURE)
    size = len(data)
    while pos + 12 <= size:
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if kind in PNG_TEXT_CHUNKS or kind.lower() == PNG_EXIF:
            replacement = _png_chunk(data, pos, end, kind)
            if replacement is not None:
                kept.replace(pos, end, replacement)
        elif kind == b"IEND":
            # Its 12 bytes, whatever length it claims: readers ignore it, and a re-review's
            # IEND claiming 2 GB kept an eXIf after it whole.
            if pos + 12 < size:
                kept.replace(pos + 12, size)
            break
        pos = end
    return bytes(kept.upto(len(data))) if kept.replaced else data


def _png_chunk(data: bytes, pos: int, end: int, kind: bytes) -> bytes | None:
    """Return what replaces the chunk at `data[pos:end]`: b"" drops it, None keeps it."""
    if kind in PNG_TEXT_CHUNKS:
        return b""
    if kind.lower() == PNG_EXIF:
        chunk = bytearray(data[pos:end])
        # The chunk holds the TIFF block itself, though some writers put a JPEG-style header first.
        start = 8 + (len(EXIF_HEADER) if chunk.startswith(EXIF_HEADER, 8) else 0)
        if not empty_gps(chunk, start):
            return None
        if end <= len(data):  # a whole chunk: its CRC covers type and data
            struct.pack_into(">I", chunk, len(chunk) - 4, zlib.crc32(chunk[4:-4]))
        return bytes(chunk)
    return None


# --- WebP --------------------------------------------------------------------------------


def _webp(data: bytes) -> bytes:
    """Walk the chunks inside the RIFF container; bytes after it go.

    The RIFF size is rewritten to fit what is kept; a tail inside the container too short
    to be a chunk is left out.
    """
    pos = 12
    kept = Splice(data, pos)
    (riff_size,) = struct.unpack_from("<I", data, 4)
    size = max(pos, min(len(data), 8 + riff_size))  # readers ignore what follows the RIFF
    dropped_xmp = False
    while pos + 8 <= size:
        kind = data[pos : pos + 4]
        (length,) = struct.unpack_from("<I", data, pos + 4)
        end = min(size, pos + 8 + length + (length & 1))  # padded to an even size
        if kind == b"XMP ":
            kept.replace(pos, end)
            dropped_xmp = True
        elif kind == b"EXIF":
            chunk = bytearray(data[pos:end])
            skip = 8 + (len(EXIF_HEADER) if chunk.startswith(EXIF_HEADER, 8) else 0)
            if empty_gps(chunk, skip):
                kept.replace(pos, end, chunk)
        pos = end
    chunks = kept.upto(pos)
    # A VP8X too short to hold its flags is left for the decoder to refuse (a review's
    # empty one made this a 500).
    if dropped_xmp and chunks[:4] == b"VP8X" and len(chunks) > 8:
        chunks[8] &= ~0x04 & 0xFF  # the "has XMP" flag
    riff = b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP"
    return riff + bytes(chunks)


# --- GIF ---------------------------------------------------------------------------------


def _gif(data: bytes) -> bytes:
    """Drop XMP application extensions, comments and what follows the trailer, walking the
    blocks as Pillow reads them.

    Pillow skips a byte that starts no block, and a block whose sub-blocks run past the
    end of the file simply ends there; such files decode, so they are walked the same
    way rather than returned with their XMP. Only a file cut short before its first
    block is returned as it is.
    """
    pos = _gif_first_block(data)
    if pos is None:
        return data
    kept = Splice(data)
    size = len(data)
    while pos < size:
        kind = data[pos]
        if kind == GIF_EXTENSION:
            end = _gif_sub_blocks_end(data, pos + 2)  # past the introducer and the label
            if data.startswith(GIF_XMP, pos + 1) or data[pos + 1 : pos + 2] == COMMENT:
                kept.replace(pos, end)
            pos = end
        elif kind == GIF_IMAGE_SEPARATOR:
            pos = _gif_image_end(data, pos)
        elif kind == GIF_TRAILER:
            if pos + 1 < size:
                kept.replace(pos + 1, size)
            break
        else:
            found = GIF_BLOCK.search(data, pos)  # on to the next block, as Pillow does
            pos = found.start() if found else size
    if not kept.replaced:
        return data  # nothing to drop: no copy
    swallowed = kept.copied >= size and data[pos : pos + 1] != bytes([GIF_TRAILER])
    out = kept.upto(size)
    if swallowed:  # a dropped block ran to the end, trailer and all
        out.append(GIF_TRAILER)
    return bytes(out)


def _gif_first_block(data: bytes) -> int | None:
    """Return where the blocks start, past the header, screen descriptor and colour table."""
    if len(data) < GIF_SCREEN:
        return None
    start = GIF_SCREEN + gif_colour_table_size(data[10])
    return start if start <= len(data) else None


def _gif_image_end(data: bytes, pos: int) -> int:
    """Return where the image at `pos` ends: descriptor, colour table, LZW code size, data."""
    if pos + GIF_DESCRIPTOR > len(data):
        return len(data)
    table = gif_colour_table_size(data[pos + 9])
    return _gif_sub_blocks_end(data, pos + GIF_DESCRIPTOR + table + 1)


def _gif_sub_blocks_end(data: bytes, pos: int) -> int:
    """Return where the chain of sub-blocks at `pos` ends, past its empty terminator."""
    size = len(data)
    while pos < size:
        length = data[pos]
        if not length:
            return pos + 1
        pos += 1 + length
    return size
