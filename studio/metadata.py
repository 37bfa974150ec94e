"""Strip location data from uploaded photos, losslessly: the pixels are never re-encoded.

A phone photo carries where it was taken in its EXIF GPS directory and often again in an
XMP packet; editors add place names (IPTC) and ImageMagick copies EXIF and XMP into PNG
text chunks as hex. Reference photos are shown to everyone in the studio and sent to
Ember, so uploads lose all of these before they are hashed and stored.

Every format's parts are kept by an allow-list, not dropped by a list of bad ones: a review
found a place that exiftool reads through five EXIF routes and seven chunks or extensions
that a list of bad ones had not named. EXIF, wherever it is, is cut down in place to its
orientation (studio/tiff_places.py), so a phone's photo still shows upright:

- JPEG (studio/jpeg_places.py): the first EXIF block is cut down; every further EXIF
  block, every other APP1 (XMP, and EXIF under a header Pillow ignores), every comment and
  every application segment but those that say how to show the pixels go, before the
  first scan and between scans, and so does what follows the picture (a motion photo's
  video). In a multi-picture file nothing before its last picture moves: there what goes
  is blanked in place, and each picture its index names is looked at as the first;
- PNG: the chunks `PNG_KEPT` names stay and `eXIf` (or `exIf`, as older ImageMagick named
  it) is cut down (its CRC recomputed); every other chunk goes: text chunks hold XMP
  packets, ImageMagick's "Raw profile type" copies of EXIF, XMP, IPTC or Photoshop
  resources and its `exif:GPS…` properties, or any words at all, which a reader may show;
- WebP: the chunks `WEBP_KEPT` names stay and `EXIF` is cut down; any other goes (`XMP `,
  C2PA), and the VP8X flag that announced XMP is cleared; an animation frame keeps only its
  image's chunks;
- GIF: a frame's graphic control and the looping extension stay, each no longer than what
  it has to say; every other extension (XMP, C2PA, a colour profile, comments) and bytes
  between blocks go.

A colour profile's words (description, copyright, device names) are emptied in place
wherever it is kept (studio/icc_places.py).

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
from studio.icc_places import blank_text
from studio.jpeg_places import strip_jpeg
from studio.splice import Splice
from studio.tiff_places import keep_orientation

EXIF_HEADER = b"Exif\x00\x00"

# The PNG chunks kept: those that make or say how to show the pixels (an animated PNG's
# too), a colour profile without its words, and EXIF cut down to its orientation. Any
# other goes: text (XMP, ImageMagick's copies of EXIF and IPTC, any words), the old
# `tXMP`, compressed EXIF (`zxIf`), C2PA's `caBX`, a maker's own (a review's exiftool read
# a place from each of those).
PNG_KEPT = {
    *(b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"cHRM", b"gAMA", b"sBIT"),
    *(b"sRGB", b"cICP", b"mDCv", b"cLLi", b"bKGD", b"hIST", b"pHYs"),
    *(b"acTL", b"fcTL", b"fdAT"),
}
PROFILE_LIMIT = 4 << 20  # bytes of a PNG's profile inflated to empty its words; past it, kept
PNG_PROFILE, PNG_PROFILE_NAME = b"iCCP", b"ICC Profile"  # the profile kept, under this name
PNG_EXIF = b"exif"  # the chunk's type, whatever its letters' case: `exIf` was ImageMagick's
# The WebP chunks kept, likewise (a profile without its words): XMP, C2PA and any other
# go, EXIF is cut down.
WEBP_KEPT = {b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ANIM", b"ANMF"}
WEBP_EXIF = b"EXIF"
WEBP_PROFILE = b"ICCP"
WEBP_FRAME = b"ANMF"  # an animation's frame: a head, then the frame's own chunks
WEBP_FRAME_HEAD = 16  # bytes: where it goes, its size, how long it shows, how it is drawn
WEBP_FRAME_KEPT = {b"ALPH", b"VP8 ", b"VP8L"}
VP8X_XMP = 0x04  # the VP8X flag that says an XMP chunk follows

GIF_TRAILER = 0x3B
GIF_GRAPHIC_CONTROL = 0xF9  # a frame's delay and transparency
# The GIF application extensions kept, by label, block size and identifier: looping. Any
# other goes (XMP, C2PA, a maker's own, a colour profile, whose words a review filled and
# which browsers do not read), as do every comment and any plain text.
GIF_LOOPING = tuple(b"\xff\x0b" + name for name in (b"NETSCAPE2.0", b"ANIMEXTS1.0"))
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
    profiled = False
    while pos + 12 <= size:
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if kind == PNG_PROFILE and profiled:
            # A PNG has one profile: each further one goes unread, as each would be
            # inflated (thousands of small chunks of 4 MB profiles would cost minutes).
            kept.replace(pos, end)
        elif kind == b"IEND":
            # Its 12 bytes, whatever length it claims: readers ignore it, and a re-review's
            # IEND claiming 2 GB kept an eXIf after it whole.
            if pos + 12 < size:
                kept.replace(pos + 12, size)
            break
        elif (replacement := _png_chunk(data, pos, end, kind)) is not None:
            kept.replace(pos, end, replacement)
        profiled = profiled or kind == PNG_PROFILE
        pos = end
    return bytes(kept.upto(len(data))) if kept.replaced else data


def _png_chunk(data: bytes, pos: int, end: int, kind: bytes) -> bytes | None:
    """Return what replaces the chunk at `data[pos:end]`: b"" drops it, None keeps it."""
    if kind == PNG_PROFILE:
        return _png_profile(data, pos, end)
    if kind in PNG_KEPT:
        return None
    if kind.lower() == PNG_EXIF:
        chunk = bytearray(data[pos:end])
        # The chunk holds the TIFF block itself, though some writers put a JPEG-style header first.
        start = 8 + (len(EXIF_HEADER) if chunk.startswith(EXIF_HEADER, 8) else 0)
        whole = end <= len(data)  # a chunk cut short by the file's end has no CRC
        if not keep_orientation(chunk, start, len(chunk) - 4 if whole else None):
            return None
        if whole:  # its CRC covers type and data
            struct.pack_into(">I", chunk, len(chunk) - 4, zlib.crc32(chunk[4:-4]))
        return bytes(chunk)
    return b""


def _png_profile(data: bytes, pos: int, end: int) -> bytes | None:
    """Return the colour profile chunk at `data[pos:end]` under Pillow's name for it, or
    None when it has that name (or is cut short): the name is any words (a re-review's was
    a place, which exiftool shows)."""
    named = data.find(b"\x00", pos + 8, min(end - 4, pos + 8 + 80))
    if named < 0 or end > len(data) or data[named + 1 : named + 2] != b"\x00":
        return None  # cut short, or compressed otherwise than PNG allows: for the decoder
    packed = data[named + 2 : end - 4]
    profile = _inflated(packed)
    if profile is not None and blank_text(profile):
        packed = zlib.compress(profile)
    elif data[pos + 8 : named] == PNG_PROFILE_NAME:
        return None
    body = PNG_PROFILE + PNG_PROFILE_NAME + b"\x00\x00" + packed
    return struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))


def _inflated(packed: bytes) -> bytearray | None:
    """Return a PNG profile inflated, at most PROFILE_LIMIT bytes of it; None if it is more
    or does not inflate (left for the decoder, which reads it with its own bound)."""
    inflater = zlib.decompressobj()
    try:
        profile = inflater.decompress(packed, PROFILE_LIMIT + 1)
    except zlib.error:
        return None
    return bytearray(profile) if len(profile) <= PROFILE_LIMIT else None


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
    while pos + 8 <= size:
        kind = data[pos : pos + 4]
        (length,) = struct.unpack_from("<I", data, pos + 4)
        end = min(size, pos + 8 + length + (length & 1))  # padded to an even size
        if kind == WEBP_PROFILE:
            chunk = bytearray(data[pos:end])
            if blank_text(chunk, 8, 8 + length):
                kept.replace(pos, end, chunk)
        elif kind == WEBP_EXIF:
            chunk = bytearray(data[pos:end])
            skip = 8 + (len(EXIF_HEADER) if chunk.startswith(EXIF_HEADER, 8) else 0)
            if keep_orientation(chunk, skip, 8 + length):  # not its padding byte
                kept.replace(pos, end, chunk)
        elif kind == WEBP_FRAME:
            frame = _webp_frame(data, pos, min(size, pos + 8 + length))
            if frame is not None:
                kept.replace(pos, end, frame)
        elif kind not in WEBP_KEPT:
            kept.replace(pos, end)
        pos = end
    chunks = kept.upto(pos)
    # A VP8X too short to hold its flags is left for the decoder to refuse (a review's
    # empty one made this a 500).
    if chunks[:4] == b"VP8X" and len(chunks) > 8:
        chunks[8] &= ~VP8X_XMP & 0xFF
    riff = b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP"
    return riff + bytes(chunks)


def _webp_frame(data: bytes, pos: int, end: int) -> bytes | None:
    """Return the animation frame at `data[pos:end]` with only its image's chunks (`ALPH`,
    `VP8 `, `VP8L`), or None when it has no other: a frame may carry unknown chunks, and a
    re-review's held XMP."""
    parts, dropped = [data[pos + 8 : pos + 8 + WEBP_FRAME_HEAD]], False
    at = pos + 8 + WEBP_FRAME_HEAD
    while at + 8 <= end:
        (length,) = struct.unpack_from("<I", data, at + 4)
        stop = min(end, at + 8 + length + (length & 1))
        if data[at : at + 4] in WEBP_FRAME_KEPT:
            parts.append(data[at:stop])
        else:
            dropped = True
        at = stop
    if not dropped:
        return None
    body = b"".join(parts)
    return WEBP_FRAME + struct.pack("<I", len(body)) + body + b"\x00" * (len(body) & 1)


# --- GIF ---------------------------------------------------------------------------------


def _gif(data: bytes) -> bytes:
    """Drop every extension but a frame's graphic control and the kept application
    extension (`GIF_LOOPING`), and what follows the trailer, walking the blocks as Pillow
    reads them.

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
            if not _gif_kept(data, pos + 1):
                kept.replace(pos, end)
            elif (said := _gif_said(data, pos, end)) is not None:
                kept.replace(pos, end, said)
            pos = end
        elif kind == GIF_IMAGE_SEPARATOR:
            pos = _gif_image_end(data, pos)
        elif kind == GIF_TRAILER:
            if pos + 1 < size:
                kept.replace(pos + 1, size)
            break
        else:
            found = GIF_BLOCK.search(data, pos)  # on to the next block, as Pillow does
            kept.replace(pos, found.start() if found else size)  # bytes Pillow skips go
            pos = found.start() if found else size
    if not kept.replaced:
        return data  # nothing to drop: no copy
    swallowed = kept.copied >= size and data[pos : pos + 1] != bytes([GIF_TRAILER])
    out = kept.upto(size)
    if swallowed:  # a dropped block ran to the end, trailer and all
        out.append(GIF_TRAILER)
    return bytes(out)


def _gif_said(data: bytes, pos: int, end: int) -> bytes | None:
    """Return the extension at `data[pos:end]` cut to what it has to say, for one whose
    first data sub-block says it all (a graphic control: 4 bytes; looping: 3), or None
    when it says no more (or too little, left for the decoder).

    A re-review's XMP rode in further sub-blocks of both, and in a graphic control's one
    sub-block of 255 bytes: exiftool shows none of it, a search of the bytes finds it.
    """
    if data[pos + 1] == GIF_GRAPHIC_CONTROL:
        at, says = pos + 2, 4
    elif data.startswith(GIF_LOOPING, pos + 1):
        at, says = pos + 2 + 1 + 11, 3  # past the application's block: its size, 11 bytes
    else:
        return None
    if at >= len(data) or data[at] < says or at + 1 + says > len(data):
        return None
    said = data[pos:at] + bytes([says]) + data[at + 1 : at + 1 + says] + b"\x00"
    return None if data[pos:end] == said else said


def _gif_kept(data: bytes, label: int) -> bool:
    """Say whether the extension whose label is at `data[label]` is kept."""
    if data[label : label + 1] == bytes([GIF_GRAPHIC_CONTROL]):
        return True
    return data.startswith(GIF_LOOPING, label)


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
