"""Strip location data from uploaded photos, losslessly: the pixels are never re-encoded.

A phone photo carries where it was taken in its EXIF GPS directory and often again in an
XMP packet; editors add place names (IPTC) and ImageMagick copies EXIF and XMP into PNG
text chunks as hex. Reference photos are shown to everyone in the studio and sent to
Ember, so uploads lose all of these before they are hashed and stored:

- JPEG: the GPS directory of the EXIF (APP1, `Exif\0\0`) is emptied in place (its entries
  and their data zeroed, its count set to 0), so every other offset in the block stays
  valid and orientation, camera and date survive; every other APP1 (XMP, Extended XMP,
  and EXIF under a header some readers accept and Pillow does not, `Exif\0\xff`), every
  comment (COM, where some tools put an XMP packet) and every application segment that
  says nothing about the pixels (`JPEG_KEPT` names those that do: Photoshop's IPTC place
  names in APP13, XMP under APP2, a tool's text in APP12 go) are dropped whole, before the
  first scan and between scans alike (`jpeg.later_parts` walks to the end of the
  picture), and so is what follows the picture (a phone's trailer, a motion photo's video,
  which may say where it was filmed). In a multi-picture file (MPO, whose index points at
  its further images by offset) nothing moves: those segments are blanked in place
  instead, what follows the first picture stays (its further pictures), and the further
  images lose their GPS and XMP in place too;
- PNG: the GPS directory of `eXIf` is emptied in place (its CRC recomputed); every text
  chunk (tEXt, zTXt, iTXt) is dropped whole: they hold XMP packets, ImageMagick's "Raw
  profile type" copies of EXIF, XMP, IPTC or Photoshop resources and its `exif:GPS…`
  properties, or any words at all, which a reader may show;
- WebP: the GPS directory of the `EXIF` chunk is emptied in place; the `XMP ` chunk is
  dropped whole;
- GIF: the XMP application extension ("XMP DataXMP") is dropped whole.

Everything else, compressed image data included, is copied byte for byte (a JPEG's
0xFF fill bytes too). Each container is walked as Pillow reads it, stray bytes between
JPEG segments or GIF blocks skipped as Pillow skips them, so that what Pillow finds in a
stored file has been looked at here; a block too broken to walk is left as it is, for
the decoder that checks every upload to refuse.
"""

import re
import struct
import zlib

from studio import jpeg
from studio.chunks import (
    GIF_DESCRIPTOR,
    GIF_EXTENSION,
    GIF_IMAGE_SEPARATOR,
    GIF_SCREEN,
    GIF_SIGNATURES,
    PNG_SIGNATURE,
    gif_colour_table_size,
)

GPS_IFD_TAG = 0x8825
# TIFF field type -> bytes per value (the types EXIF uses).
TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8}
EXIF_HEADER = b"Exif\x00\x00"
TIFF_HEADER_SIZE = 8  # byte order, 42, where the first directory is
SHORT = 3  # the TIFF field type of a 2-byte value

JPEG_APP1 = 0xE1
JPEG_COM = 0xFE  # a comment: any bytes, an XMP packet among them
# Markers whose segments can hold a place: every application segment, and comments.
JPEG_LOOKED_AT = {*range(0xE0, 0xF0), JPEG_COM}
# The application segments kept, by what their bodies start with: those that say how to
# show the pixels (JFIF's density, a colour profile, Adobe's colour transform) and a
# multi-picture index. Any other (XMP under APP2, text in APP12, IPTC in APP13, C2PA's
# APP11, a maker's own) goes, as every comment does.
JPEG_KEPT = {
    0xE0: (b"JFIF", b"JFXX"),
    0xE2: (b"ICC_PROFILE\x00", b"MPF\x00"),
    0xEE: (b"Adobe",),
}
# Markers Pillow reads as having no length (restart, start and end of image, reserved
# ones), and 0x00: 0xFF 0x00 is an escaped 0xFF, which Pillow skips as junk.
JPEG_NO_LENGTH = {0x00, 0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)}
JPEG_SOS = 0xDA  # start of scan: the compressed data follows
JPEG_SCAN = b"\xff\xda"
JPEG_SEGMENTS = set(range(0xC0, 0xFF)) - JPEG_NO_LENGTH - {JPEG_SOS}  # markers with a length
NOT_FILL = re.compile(rb"[^\xff]")
FILL_BLOCK = b"\xff" * 65536  # a run of fill bytes is compared against this, a block a time
MPF_ID = b"MPF\x00"  # a multi-picture index: an APP2 segment (FF E2, length) starting so
# An APP1 segment (marker, length) holding EXIF or XMP of any header, found by searching.
LATER_APP1 = re.compile(rb"\xff\xe1(..)(Exif|http://ns\.adobe\.com/)", re.DOTALL)

# Text chunks are dropped whole; ICC profiles stay: they carry no place and viewers use them.
PNG_TEXT_CHUNKS = {b"tEXt", b"zTXt", b"iTXt"}
PNG_LOOKED_AT = PNG_TEXT_CHUNKS | {b"eXIf"}

GIF_TRAILER = 0x3B
GIF_XMP_ID = b"XMP DataXMP"  # application identifier and authentication code
GIF_XMP = b"\xff\x0b" + GIF_XMP_ID  # after the introducer: label, block size, identifier
GIF_BLOCK = re.compile(rb"[\x21\x2c\x3b]")


def strip_location(data: bytes) -> bytes:
    """Return `data` without location metadata; bytes of other kinds are returned as they are.

    `data` has passed `originals.precheck`, which bounds the walks (jpeg.BadJpeg otherwise).
    """
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data.startswith(PNG_SIGNATURE):
        return _png(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:6] in GIF_SIGNATURES:
        return _gif(data)
    return data


def empty_gps(tiff: bytearray, start: int = 0) -> bool:
    """Empty the GPS directories of the TIFF block at `tiff[start:]` in place; True if any.

    Each directory's count is set to 0 first, so that a reader finds it empty even when
    its entries run past the end of the block; the entries that can be reached are then
    zeroed with their data. Every directory a GPS entry points at is emptied: a reader
    takes the pointer whatever its type (a SHORT's in two bytes) and, when the tag comes
    twice, the last one. A block too broken to find a directory in is left as it is.
    """
    try:
        order, directories = _gps_directories(tiff, start)
        counts = [struct.unpack_from(order + "H", tiff, at)[0] for at in directories]
        for directory in directories:
            struct.pack_into(order + "H", tiff, directory, 0)
        # Entries zeroed in all, at most what the block holds side by side: a review's
        # 65,535 GPS pointers 2 bytes apart made every directory a full one (24 minutes
        # for a 1.6 MB upload). Every directory is empty already; past the budget only
        # overlapping entries, which no directory now names, are left as they are.
        budget = (len(tiff) - start) // 12 + 1
        for directory, count in zip(directories, counts, strict=True):
            if budget <= 0:
                break
            _zero_entries(tiff, start, directory + 2, min(count, budget), order)
            budget -= count
    except (struct.error, IndexError, ValueError):
        return False
    return bool(directories)


def _gps_directories(tiff: bytearray, start: int) -> tuple[str, list[int]]:
    """Return the block's byte order and where each GPS directory's count is."""
    order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[start : start + 2]))
    if order is None:
        return "<", []
    (ifd0,) = struct.unpack_from(order + "I", tiff, start + 4)
    found = [
        start + gps
        for gps in _entry_values(tiff, start + ifd0, order, GPS_IFD_TAG)
        # Not a damaged pointer into the TIFF header, nor one past the block.
        if gps >= TIFF_HEADER_SIZE and start + gps + 2 <= len(tiff)
    ]
    return order, list(dict.fromkeys(found))


def _zero_entries(tiff: bytearray, start: int, first: int, count: int, order: str) -> None:
    """Zero the `count` directory entries from `first` on, and the data they point to."""
    for entry in range(first, min(first + 12 * count, len(tiff) - 11), 12):
        _tag, kind, n, offset = struct.unpack_from(order + "HHII", tiff, entry)
        size = TYPE_SIZES.get(kind, 1) * n
        # A value of up to 4 bytes is in the entry itself; none lies in the TIFF header,
        # which a damaged entry must not wipe (readers would then refuse the whole block).
        if size > 4 and offset >= TIFF_HEADER_SIZE and start + offset + size <= len(tiff):
            tiff[start + offset : start + offset + size] = bytes(size)
        tiff[entry : entry + 12] = bytes(12)


def _entry_values(tiff: bytearray, ifd: int, order: str, tag: int) -> list[int]:
    """Return the value of every entry of `tag` in the directory at `ifd` (an offset each)."""
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    values = []
    for entry in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
        entry_tag, kind, _n, value = struct.unpack_from(order + "HHII", tiff, entry)
        if entry_tag == tag:
            if kind == SHORT:  # the value is in the field's first two bytes
                (value,) = struct.unpack_from(order + "H", tiff, entry + 8)
            values.append(int(value))
    return values


class _Splice:
    """What a walk keeps of `data`: its bytes from `start` on, with some ranges replaced."""

    def __init__(self, data: bytes, start: int = 0) -> None:
        self.data = data
        self.out = bytearray()
        self.copied = start  # data[start:copied] is dealt with: copied into `out`, or replaced
        self.replaced = False

    def replace(self, start: int, end: int, replacement: bytes = b"") -> None:
        """Put `replacement` (by default nothing: a drop) where `data[start:end]` was."""
        self.out += memoryview(self.data)[self.copied : start]  # one copy, not two
        self.out += replacement
        self.copied = end
        self.replaced = True

    def upto(self, end: int) -> bytearray:
        """Copy what is left of `data` up to `end`, and return what was kept."""
        self.out += memoryview(self.data)[self.copied : end]
        self.copied = max(self.copied, end)
        return self.out


# --- JPEG --------------------------------------------------------------------------------


def _jpeg(data: bytes) -> bytes:
    """Walk the segments before the first scan as Pillow reads them, then look at the rest."""
    # A multi-picture file's index points at its further images by offset: keep sizes.
    keep_sizes = _has_mpf_index(data)
    kept = _Splice(data)
    pos = 2
    size = len(data)
    # A hostile file can hold millions of tiny segments: the loop does as little as it
    # can for each, and looks closer only at the two markers that can hold a location.
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            # Bytes between segments: Pillow and libjpeg skip them to the next 0xFF.
            found = data.find(b"\xff", pos)
            pos = found if found >= 0 else size
            continue
        marker = data[pos + 1]
        if marker in JPEG_SEGMENTS:  # the common case first
            length = data[pos + 2] << 8 | data[pos + 3]  # counts itself: 2 at least
            end = pos + 2 + (length if length > 2 else 2)  # as Pillow reads one saying less
            if marker in JPEG_LOOKED_AT:
                replacement = _jpeg_segment(data, pos, end, keep_sizes)
                if replacement is not None:
                    kept.replace(pos, end, replacement)
            pos = end
        elif marker == 0xFF:  # a fill byte; a run of them is skipped in one step
            pos = pos + 1 if data[pos + 2] != 0xFF else _skip_fill(data, pos)
        elif marker in JPEG_NO_LENGTH:
            pos += 2
        else:
            break  # the start of scan, or no marker (the decoder refuses the file)
    # What follows the picture (a phone's trailer, a motion photo's video, which can hold
    # where it was filmed) is no part of it and goes; but a multi-picture file's further
    # pictures, which its index finds there by offset, stay (their EXIF and XMP below).
    end, trailer = pos, False  # without a scan there is nothing to follow: bytes as they are
    if data.startswith(JPEG_SCAN, pos):
        end = _jpeg_scans(data, pos, kept, keep_sizes)
        trailer = end < size and not keep_sizes
    if not kept.replaced and not trailer and LATER_APP1.search(data, end) is None:
        return data  # the usual photo: nothing to strip, and no copy of its bytes made
    out = kept.upto(end)
    if not trailer:
        out += _after_first_scan(data[end:])
    return bytes(out)


def _jpeg_scans(data: bytes, pos: int, kept: _Splice, keep_sizes: bool) -> int:
    """Strip the segments between the scans of the picture whose first scan is at `pos`
    (comments and application segments, as before the first); return where it ends."""
    parts, end = jpeg.later_parts(data, pos)  # bounded by originals.precheck
    for marker, start, stop in parts:
        if marker in JPEG_LOOKED_AT:
            replacement = _jpeg_segment(data, start, stop, keep_sizes)
            if replacement is not None:
                kept.replace(start, stop, replacement)
    return end


def _skip_fill(data: bytes, pos: int) -> int:
    """Return where the marker starts that the 0xFF fill bytes at `pos` pad.

    Fill bytes carry nothing, but they are kept (copied with the segments around them)
    so that the output differs from the input only where location was. A run of them
    is skipped in one C-level search: one byte per loop turn took seconds per 24 MB.
    """
    pos += 1
    while data.startswith(FILL_BLOCK, pos):  # a memory compare: 24 MB in a few milliseconds
        pos += len(FILL_BLOCK)
    found = NOT_FILL.search(data, pos)  # within one block of `pos`
    marker = found.start() if found else len(data)
    return marker - 1  # the last 0xFF of the run introduces the marker


def _has_mpf_index(data: bytes) -> bool:
    """Say whether `data` holds a multi-picture index segment anywhere.

    The identifier is searched for first: a search that starts at each 0xFF (the marker)
    stumbles at every byte of a run of fill bytes.
    """
    found = data.find(MPF_ID, 4)
    while found >= 0:
        if data.startswith(b"\xff\xe2", found - 4):
            return True
        found = data.find(MPF_ID, found + 1)
    return False


def _after_first_scan(rest: bytes) -> bytes:
    """Strip, without moving a byte, the APP1 segments after the first image's scan.

    A multi-picture JPEG (MPO, as phones write for depth or panoramas) holds further
    images after the first, each with its own EXIF and XMP, and an index that points at
    each by offset. So sizes must not change here: the GPS directory is emptied in place
    and an XMP packet is overwritten with spaces (XMP's own padding). The first image's
    compressed data cannot hold these bytes: within a scan 0xFF is followed by 0x00 or
    a restart marker only.
    """
    found = LATER_APP1.search(rest)
    if found is None:
        return rest  # one C-level scan: the usual case
    out = bytearray(rest)
    while found is not None:
        start, body = found.start(), found.end()
        end = min(len(out), start + 2 + int.from_bytes(found[1], "big"))
        if out.startswith(EXIF_HEADER, start + 4):
            segment = out[start:end]
            if empty_gps(segment, 4 + len(EXIF_HEADER)):
                out[start:end] = segment
        elif start + 4 < end:
            out[start + 4 : end] = b" " * (end - start - 4)
        found = LATER_APP1.search(rest, body)
    return bytes(out)


def _jpeg_segment(data: bytes, pos: int, end: int, keep_sizes: bool) -> bytes | None:
    """Return what replaces the segment at `data[pos:end]`: b"" drops it, None keeps it.

    With `keep_sizes`, a segment to drop is blanked instead: its body is overwritten with
    spaces (XMP's own padding), so readers find nothing in it.
    """
    end = min(end, len(data))
    marker = data[pos + 1]
    if marker == JPEG_APP1 and data.startswith(EXIF_HEADER, pos + 4, end):
        if end - pos < 4 + len(EXIF_HEADER) + TIFF_HEADER_SIZE:
            return None  # no room for a directory: the EXIF reader finds nothing in it
        segment = bytearray(data[pos:end])
        return bytes(segment) if empty_gps(segment, 4 + len(EXIF_HEADER)) else None
    if any(data.startswith(kept, pos + 4, end) for kept in JPEG_KEPT.get(marker, ())):
        return None
    return data[pos : pos + 4] + b" " * (end - pos - 4) if keep_sizes else b""


# --- PNG ---------------------------------------------------------------------------------


def _png(data: bytes) -> bytes:
    """Walk the chunks up to IEND; whatever follows it is copied as it is."""
    kept = _Splice(data)
    pos = len(PNG_SIGNATURE)
    size = len(data)
    while pos + 12 <= size:
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if kind in PNG_LOOKED_AT:
            replacement = _png_chunk(data, pos, end, kind)
            if replacement is not None:
                kept.replace(pos, end, replacement)
        elif kind == b"IEND":
            break
        pos = end
    return bytes(kept.upto(len(data))) if kept.replaced else data


def _png_chunk(data: bytes, pos: int, end: int, kind: bytes) -> bytes | None:
    """Return what replaces the chunk at `data[pos:end]`: b"" drops it, None keeps it."""
    if kind in PNG_TEXT_CHUNKS:
        return b""
    if kind == b"eXIf":
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
    """Walk the chunks inside the RIFF container; bytes after it are copied as they are.

    The RIFF size is rewritten to fit what is kept; a tail inside the container too short
    to be a chunk is left out.
    """
    pos = 12
    kept = _Splice(data, pos)
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
    return riff + bytes(chunks) + data[size:]


# --- GIF ---------------------------------------------------------------------------------


def _gif(data: bytes) -> bytes:
    """Drop XMP application extensions, walking the blocks as Pillow reads them.

    Pillow skips a byte that starts no block, and a block whose sub-blocks run past the
    end of the file simply ends there; such files decode, so they are walked the same
    way rather than returned with their XMP. Only a file cut short before its first
    block is returned as it is.
    """
    pos = _gif_first_block(data)
    if pos is None or GIF_XMP_ID not in data:
        return data  # cut short, or no XMP anywhere: nothing to walk for (one C-level scan)
    kept = _Splice(data)
    size = len(data)
    while pos < size:
        kind = data[pos]
        if kind == GIF_EXTENSION:
            end = _gif_sub_blocks_end(data, pos + 2)  # past the introducer and the label
            if data.startswith(GIF_XMP, pos + 1):
                kept.replace(pos, end)
            pos = end
        elif kind == GIF_IMAGE_SEPARATOR:
            pos = _gif_image_end(data, pos)
        elif kind == GIF_TRAILER:
            break
        else:
            found = GIF_BLOCK.search(data, pos)  # on to the next block, as Pillow does
            pos = found.start() if found else size
    swallowed = kept.copied >= size  # a dropped packet ran to the end, trailer and all
    out = kept.upto(size)
    if swallowed:
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
