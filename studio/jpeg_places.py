"""Stripping a JPEG of what may say where it was taken, losslessly (studio/metadata.py).

Its first picture is walked as Pillow reads its header and as a decoder reads its scans
(`jpeg.later_parts`), to its end-of-image marker. On the way its first EXIF block is cut
down in place to the orientation (studio/tiff_places.py); every further EXIF block of its
header goes (Pillow joins them to the first, and a place could sit across the two; one
between scans, which Pillow does not read, is cut down too); every comment and every
application segment `JPEG_KEPT` does not name goes whole. What follows the picture (a
phone's trailer, a motion photo's video, which may say where it was filmed) goes too.

A multi-picture file (an MPO, a phone's depth map or HDR gain map beside the photo) is one
whose first picture's header holds an index (`studio/mpf.py`; Pillow reads the last,
exiftool every one, and each is followed here) of further pictures by offset: nothing
before the last of them may move. There what would go is overwritten with spaces instead
(XMP's own padding), so the gain map's XMP is lost with the rest, and each picture an
index names is walked as the first, overlapping ones too; what no walk saw before the
last picture's end is searched for EXIF and XMP (`LATER_APP1`), and only what follows the
last picture goes. An index that cannot be read keeps no offset: the file is stripped as
if it had none.
"""

import re
from collections.abc import Iterator

from studio import jpeg, mpf
from studio.icc_places import blank_text
from studio.splice import Splice
from studio.tiff_places import keep_orientation

EXIF_HEADER = b"Exif\x00\x00"
SOI = b"\xff\xd8"
EOI = b"\xff\xd9"  # the end-of-image marker a whole picture ends with
JPEG_APP1 = 0xE1
JPEG_APP2 = 0xE2
JPEG_COM = 0xFE  # a comment: any bytes, an XMP packet among them
# Markers whose segments can hold a place: every application segment, and comments.
JPEG_LOOKED_AT = {*range(0xE0, 0xF0), JPEG_COM}
# The application segments kept, by what their bodies start with: those that say how to
# show the pixels (JFIF's density, a colour profile, Adobe's colour transform) and a
# multi-picture index. Any other (XMP under APP2, text in APP12, IPTC in APP13, C2PA's
# APP11, a maker's own) goes, as every comment does.
# A colour profile in one segment (part 1 of 1): one split over several is kept as it is.
ICC_WHOLE = b"ICC_PROFILE\x00\x01\x01"
JPEG_KEPT = {
    0xE0: (b"JFIF",),  # not JFXX: a thumbnail, a JPEG of its own whose EXIF can hold a place
    JPEG_APP2: (b"ICC_PROFILE\x00", mpf.MPF_ID),
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
# An APP1 segment (marker, length) holding EXIF or XMP of any header, found by searching.
LATER_APP1 = re.compile(rb"\xff\xe1(..)(Exif|http://ns\.adobe\.com/)", re.DOTALL)

Segment = tuple[int, int, int]  # marker, start, end
STRAY = -1  # the "marker" of bytes between a header's segments, which decoders skip


def strip_jpeg(data: bytes) -> bytes:
    """Return `data` (a JPEG that passed `originals.precheck`) without what may say where
    it was taken; `data` itself when there is nothing to strip. jpeg.BadJpeg when a further
    picture of a multi-picture file has a header or scans no decoder should be made to walk.
    """
    header, scan = _header(data, len(SOI), first=True)
    # Every index a header holds: Pillow reads the last, exiftool every one (a re-review hid
    # a picture with a place behind a first index); one that cannot be read keeps no offset.
    indexes = [start for marker, start, _end in header if _is_index(data, marker, start)]
    further = mpf.merged([mpf.pictures(data, index) for index in indexes])
    if further is None:
        return _dropped(data, header, scan)
    return _blanked(data, header, scan, further)


def _is_index(data: bytes, marker: int, start: int) -> bool:
    return marker == JPEG_APP2 and data.startswith(mpf.MPF_ID, start + 4)


def _dropped(data: bytes, header: list[Segment], scan: int) -> bytes:
    """Strip a JPEG no index points into: what goes is cut out, and what follows the picture."""
    kept = Splice(data)
    for start, end, replacement in _replacements(data, header, keep_sizes=False):
        kept.replace(start, end, replacement)
    if not data.startswith(JPEG_SCAN, scan):
        # No scan: nothing to follow, bytes as they are (the decoder refuses the file).
        return bytes(kept.upto(len(data))) if kept.replaced else data
    parts, end = _later(data, scan)
    # A picture without its end marker is blanked in place, not cut: there a marker after
    # the last scan is what ends its compressed data, and one cut out left that scan
    # running into the file's end (a fuzzed file then no longer decoded).
    ended = data.startswith(EOI, end - len(EOI))
    for start, stop, replacement in _replacements(data, parts, keep_sizes=not ended):
        kept.replace(start, stop, replacement)
    if not kept.replaced and end == len(data):
        return data  # the usual photo: nothing to strip, and no copy of its bytes made
    return bytes(kept.upto(end))  # what follows the picture goes


def _blanked(
    data: bytes, header: list[Segment], scan: int, further: list[tuple[int, int]]
) -> bytes:
    """Strip a multi-picture file in place: each picture its index names is walked as the
    first (overlapping ones too, each on what the walks before it left), what no walk saw
    before the last picture's end is searched for EXIF and XMP, and what follows it goes."""
    out = bytearray(data)
    _blank(out, header)
    end = _blank_scans(out, scan)
    last = end
    for start, _stop in further:
        if out.startswith(SOI, start):
            segments, at = _header(out, start + len(SOI), first=False)
            _blank(out, segments)
            # Where the picture ends, not the size the index gives it: a re-review's size
            # reached past it into a trailer (IPTC, a place in words), kept whole.
            last = max(last, _blank_scans(out, at))
    last = min(last, len(out))
    out[end:last] = _searched(bytes(out[end:last]))  # bytes between the pictures too
    return data if last == len(data) and out == data else bytes(out[:last])


def _blank(out: bytearray, segments: list[Segment]) -> None:
    """Blank or empty `segments` of `out` in place (sizes kept)."""
    for start, end, replacement in _replacements(out, segments, keep_sizes=True):
        out[start:end] = replacement


def _blank_scans(out: bytearray, pos: int) -> int:
    """Blank what sits between the scans of the picture whose first scan is at `pos`; return
    where the picture ends (`pos` when no scan starts there)."""
    if not out.startswith(JPEG_SCAN, pos):
        return pos
    parts, end = _later(out, pos)
    _blank(out, parts)
    return end


def _later(data: bytes | bytearray, pos: int) -> tuple[list[Segment], int]:
    """Return the segments between the scans that can hold a place, and where the picture
    whose first scan is at `pos` ends."""
    parts, end = jpeg.later_parts(data, pos)  # type: ignore[arg-type]
    return [part for part in parts if part[0] in JPEG_LOOKED_AT], end


def _header(data: bytes | bytearray, pos: int, *, first: bool) -> tuple[list[Segment], int]:
    """Walk a picture's header from `pos` as Pillow reads it; return the segments that can
    hold a place and where the walk stopped (its first scan, if it has one).

    The first picture's header passed `jpeg.check_header` (at most `jpeg.MAX_SEGMENTS`
    markers); a further one's markers are counted here, and refused past as many.
    """
    found: list[Segment] = []
    size, walked = len(data), 0
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            # Bytes between segments: Pillow and libjpeg skip them to the next 0xFF. They
            # go too (a re-review hid words there, which a search of the bytes found).
            found_at = data.find(b"\xff", pos)
            if any(data[pos : found_at if found_at >= 0 else size]):
                found.append((STRAY, pos, found_at if found_at >= 0 else size))
            pos = found_at if found_at >= 0 else size
            continue
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte; a run of them is skipped in one step
            pos = pos + 1 if data[pos + 2] != 0xFF else _skip_fill(data, pos)
            continue
        walked += 1
        if not first and walked > jpeg.MAX_SEGMENTS:
            raise jpeg.BadJpeg(f"The JPEG's header has more than {jpeg.MAX_SEGMENTS} parts.")
        if marker in JPEG_SEGMENTS:  # the common case first
            length = data[pos + 2] << 8 | data[pos + 3]  # counts itself: 2 at least
            end = pos + 2 + (length if length > 2 else 2)  # as Pillow reads one saying less
            if marker in JPEG_LOOKED_AT:
                found.append((marker, pos, min(end, size)))
            pos = end
        elif marker in JPEG_NO_LENGTH:
            pos += 2
        else:
            break  # the start of scan, or no marker (the decoder refuses the file)
    return found, pos


def _replacements(
    data: bytes | bytearray, segments: list[Segment], *, keep_sizes: bool
) -> Iterator[tuple[int, int, bytes]]:
    """Yield (start, end, replacement) for each of `segments` (in order) that changes, as
    `_replacement` says; only the first EXIF block of those given is kept (cut down):
    Pillow joins a header's further EXIF segments to it."""
    exif = False
    for marker, start, end in segments:
        if marker == STRAY:  # bytes no reader takes for a segment: zeros, or nothing
            yield start, end, bytes(end - start) if keep_sizes else b""
            continue
        replacement = _replacement(data, start, end, keep_sizes, exif_before=exif)
        exif = exif or (marker == JPEG_APP1 and data.startswith(EXIF_HEADER, start + 4, end))
        if replacement is not None:
            yield start, end, replacement


def _replacement(
    data: bytes | bytearray, pos: int, end: int, keep_sizes: bool, *, exif_before: bool
) -> bytes | None:
    """Return what replaces the segment at `data[pos:end]`: b"" drops it, None keeps it.

    With `keep_sizes`, a segment to drop is blanked instead: its body is overwritten with
    spaces (XMP's own padding), so readers find nothing in it.
    """
    marker = data[pos + 1]
    if marker == JPEG_APP1 and data.startswith(EXIF_HEADER, pos + 4, end) and not exif_before:
        segment = bytearray(data[pos:end])
        return bytes(segment) if keep_orientation(segment, 4 + len(EXIF_HEADER)) else None
    if marker == JPEG_APP2 and data.startswith(ICC_WHOLE, pos + 4, end):
        segment = bytearray(data[pos:end])  # a whole profile: its words emptied in place
        return bytes(segment) if blank_text(segment, 4 + len(ICC_WHOLE)) else None
    if any(data.startswith(kept, pos + 4, end) for kept in JPEG_KEPT.get(marker, ())):
        return None
    return bytes(data[pos : pos + 4]) + b" " * (end - pos - 4) if keep_sizes else b""


def _skip_fill(data: bytes | bytearray, pos: int) -> int:
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


def _searched(rest: bytes) -> bytes:
    """Strip, without moving a byte, the APP1 segments found by searching `rest` (what
    follows the first picture of a multi-picture file whose index cannot be read): EXIF is
    cut down in place to the orientation and an XMP packet is overwritten with spaces. The first
    picture's compressed data cannot hold these bytes: within a scan 0xFF is followed by
    0x00 or a restart marker only.
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
            if keep_orientation(segment, 4 + len(EXIF_HEADER)):
                out[start:end] = segment
        elif start + 4 < end:
            out[start + 4 : end] = b" " * (end - start - 4)
        found = LATER_APP1.search(rest, body)
    return bytes(out)
