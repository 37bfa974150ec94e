"""What would make a JPEG slow to open or decode, found before Pillow starts: padding, scans.

Pillow reads a JPEG's header in Python, one byte at a time through the fill bytes (0xFF)
and junk it skips between segments, and one handler call a segment: 24 MB of padding,
or millions of empty segments, cost it seconds before the first pixel. A progressive
JPEG is then decoded in passes, one a scan, each over the whole image: a small file that
repeats its scans costs a core for minutes. Both are measured here in a few passes of C
(regular expressions, `bytes.count`) and refused above bounds no camera or encoder comes
near (a progressive JPEG from libjpeg has 10 scans; a header, a few dozen segments).
"""

import math
import re
import struct

MAX_PADDING = 64 * 1024  # bytes of fill or junk between the header's segments, in all
MAX_SEGMENTS = 1024  # header segments before the first scan
MAX_SCANS = 100  # decoding passes (scans), whatever the image's size
# Segments from the first scan to the end of the picture (more scans, their tables, and
# what else sits between): a progressive JPEG of MAX_SCANS scans has a few hundred.
MAX_LATER_SEGMENTS = 1024
# APP1 markers (EXIF, XMP) in the whole file, further pictures' and stray bytes included:
# the location stripping looks at each (studio.metadata); a phone's MPO has a few dozen.
MAX_APP1 = 1024
# EXIF segments in the header (before the first scan). Pillow joins them into one by
# copying what it has each time, at every open: 399 of 64 KB cost seconds a page view (a
# review, over uvicorn). A camera writes one; 16 allow a megabyte of EXIF.
MAX_EXIF_PARTS = 16
EXIF = b"Exif\x00\x00"
# Bytes of coefficients a progressive JPEG's decoder holds (2 bytes each, every channel):
# a 40-megapixel photo with colour at half resolution (4:2:0) needs 120 MB.
MAX_COEFFICIENT_BYTES = 128 * 1024 * 1024
MB = 1024 * 1024
SCAN_PIXELS = 1_000_000_000  # pixels decoded across all passes: scans x width x height

SOI = b"\xff\xd8"
SOS = b"\xff\xda"
APP1 = b"\xff\xe1"
# The next marker: 0xFF and a marker code (fill bytes before it are more 0xFF).
MARKER = re.compile(rb"\xff[\x01\xc0-\xfe]")
FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers
PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})  # those of progressive JPEGs
# Markers Pillow reads without a length in a header (TEM, JPG, RSTn, SOI, EOI, JPGn): each
# is walked and counted. A second SOI or an EOI there was taken for a broken header and the
# walk stopped, while Pillow read on: 12 million SOI markers cost its open 4.4 s (a review).
STANDALONE = frozenset({0x01, 0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)})
EOI = 0xD9  # the end of the picture
IN_DATA = frozenset({0x00, 0xFF, *range(0xD0, 0xD8)})  # what follows 0xFF in a scan's data
# Where a scan's compressed data ends: 0xFF, then a marker's code (within the data 0xFF is
# followed by 0x00 or a restart marker; fill bytes before a marker are more 0xFF).
DATA_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


class BadJpeg(ValueError):
    """The JPEG would cost too much to open or decode: the message says why, for people."""


def is_jpeg(data: bytes) -> bool:
    return data.startswith(SOI)


def check_header(data: bytes) -> int:
    """Refuse a JPEG whose header Pillow would spend long on (padding, segments); return
    where its first scan starts (where the walk stopped, if none was found).

    A header that ends early or breaks is left to Pillow, which says it is broken.
    """
    pos = len(SOI)
    frame = b""  # the start-of-frame segment's body, once read
    exif_parts = 0
    padding = MAX_PADDING  # left for the whole header: 400 gaps of 32 KB cost Pillow 4 s
    for _segment in range(MAX_SEGMENTS + 1):
        found = MARKER.search(data, pos, pos + padding + 2)
        if found is None:
            if len(data) - pos > padding + 1:
                raise BadJpeg(
                    f"The JPEG is damaged: more than {MAX_PADDING // 1024} KB of padding "
                    "between the parts of its header."
                )
            return pos  # too short to hold another segment: Pillow says what is wrong
        padding -= found.start() - pos
        code = data[found.end() - 1]
        coded = data[found.end() + 2 : found.end() + 3]  # a scan's channel count
        # A first scan that codes fewer channels than the frame has: more scans follow,
        # and the decoder holds every coefficient until the last, as for a progressive one.
        if code == 0xDA and frame[5:6] and coded and coded[0] < frame[5]:
            check_coefficients(frame)
        if code == 0xDA:
            return found.start()  # the first scan starts
        pos = found.end()
        if code in STANDALONE:
            continue
        if pos + 2 > len(data):
            return pos
        (length,) = struct.unpack_from(">H", data, pos)
        if code in FRAMES:
            frame = data[pos + 2 : pos + length]
            if code in PROGRESSIVE:
                check_coefficients(frame)
        elif code == APP1[1] and data.startswith(EXIF, pos + 2):
            exif_parts += 1
            if exif_parts > MAX_EXIF_PARTS:
                raise BadJpeg(
                    f"The JPEG's EXIF is in more than {MAX_EXIF_PARTS} parts; at most "
                    f"{MAX_EXIF_PARTS} are accepted."
                )
        pos += length
    raise BadJpeg(f"The JPEG's header has more than {MAX_SEGMENTS} parts.")


def later_parts(data: bytes, pos: int) -> tuple[list[tuple[int, int, int]], int]:
    """Walk a JPEG from its first scan (`pos`, its marker) to its end as a decoder reads it.

    Return the segments met, each (marker, start, end), the scans' own among them, and
    where the picture ends: after its end-of-image marker, or at the end of `data` without
    one. What follows it is no part of the picture (a phone's trailer, a motion photo's
    video, a multi-picture file's further pictures). Each scan's compressed data is crossed
    in one C-level search. BadJpeg past MAX_LATER_SEGMENTS segments (a file of millions of
    tiny segments between its scans would cost seconds to walk in Python), or MAX_SCANS
    scans.
    """
    parts: list[tuple[int, int, int]] = []
    size = len(data)
    scans = standalone = 0
    while pos + 2 <= size:
        code = data[pos + 1] if data[pos] == 0xFF else 0
        if code in IN_DATA:  # compressed data (a restart marker's too), fill or junk
            found = DATA_END.search(data, pos + 1)
            if found is None:
                break
            pos = found.start()
        elif code == EOI:
            return parts, pos + 2
        elif code in (0x01, 0xD8):  # no length: TEM, and a start of image out of place
            pos += 2
            standalone += 1  # counted too: 12 million of them cost 1.3 s a walk (a review)
            _check_later_count(standalone)
        elif pos + 4 > size:
            break
        else:
            end = min(size, pos + 2 + max(2, data[pos + 2] << 8 | data[pos + 3]))
            parts.append((code, pos, end))
            scans += code == SOS[1]
            if scans > MAX_SCANS:  # said as check_scans says it, which counts them later
                raise BadJpeg(
                    f"The JPEG is decoded in more than {MAX_SCANS} passes; at most "
                    f"{MAX_SCANS} are accepted."
                )
            _check_later_count(len(parts))
            pos = end
    return parts, size


def _check_later_count(count: int) -> None:
    """Refuse a walk from the first scan that met more than MAX_LATER_SEGMENTS of a kind."""
    if count > MAX_LATER_SEGMENTS:
        raise BadJpeg(f"The JPEG has more than {MAX_LATER_SEGMENTS} parts between its scans.")


def check_later(data: bytes, first: int) -> None:
    """Refuse a JPEG whose walk from its first scan (at `first`) to its end is too long."""
    if data.startswith(SOS, first):
        later_parts(data, first)


def check_coefficients(frame: bytes) -> None:
    """Refuse a JPEG decoded in several scans whose decoder would hold too many coefficients.

    `frame` is the body of its start-of-frame segment. A progressive image is decoded
    in passes, and a sequential one whose scans each code some of its channels in turn,
    so libjpeg keeps every coefficient of every channel (64 of 2 bytes an 8 x 8 block)
    until the last: a 627 KB progressive CMYK file of 6324 x 6324, within the pixel cap,
    held 320 MB of them beside Pillow's canvas, and a 354-byte sequential one as much
    (found by reviews, over uvicorn). A frame too short to read is left to Pillow.
    """
    if len(frame) < 6:
        return
    height, width, count = struct.unpack_from(">HHB", frame, 1)
    channels = [frame[6 + 3 * i + 1] for i in range(count) if 6 + 3 * i + 1 < len(frame)]
    if not channels:
        return
    wide = max(c >> 4 for c in channels) or 1
    tall = max(c & 15 for c in channels) or 1
    held = sum(
        _blocks(width * (c >> 4), wide) * _blocks(height * (c & 15), tall) * 128 for c in channels
    )
    if held > MAX_COEFFICIENT_BYTES:
        raise BadJpeg(
            f"The JPEG is coded in several passes, {width} x {height} with {count} colour "
            f"channels: decoding it would hold {held / MB:.0f} MB at once, and at most "
            f"{MAX_COEFFICIENT_BYTES // MB} MB are accepted. Save it as an ordinary "
            "JPEG again (not progressive), or smaller."
        )


def _blocks(scaled: int, most: int) -> int:
    """Return the 8 x 8 blocks along one side of a channel sampled `scaled / most` times."""
    samples = math.ceil(scaled / most)
    return math.ceil(samples / 8)


def check_metadata(data: bytes) -> None:
    """Refuse a JPEG with more APP1 markers than any camera writes, counted in one C pass.

    After the first picture's scan they are found by searching (a multi-picture file's
    further pictures carry their own EXIF), and each is looked at in Python: 26 MB of
    fake ones once cost 9 to 13 s of a web process.
    """
    count = data.count(APP1)
    if count > MAX_APP1:
        raise BadJpeg(
            f"The JPEG holds {count:,} metadata parts (EXIF or XMP); at most {MAX_APP1} "
            "are accepted."
        )


def scans(data: bytes) -> int:
    """Count the scans (decoding passes) of a JPEG, those of pictures inside it included.

    From its first scan on, found by walking the header's segments as a decoder does:
    0xFF 0xDA cannot occur inside compressed data (a 0xFF there is followed by 0x00 or a
    restart marker), so every one from there on starts a scan (or sits in a segment
    between scans, and counts, generously, as one too). Before it they are only bytes of
    the header's segments: a colour profile of random bytes once read as 244 passes.
    """
    return data.count(SOS, check_header(data))


def check_scans(count: int, width: int, height: int) -> None:
    """Refuse a JPEG whose scans would decode too many pixels in all."""
    if count > MAX_SCANS or count * width * height > SCAN_PIXELS:
        raise BadJpeg(
            f"The JPEG is decoded in {count} passes over {width} x {height} pixels; at most "
            f"{MAX_SCANS} passes and {SCAN_PIXELS:,} pixels across them are accepted."
        )
