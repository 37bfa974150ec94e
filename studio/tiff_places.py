"""A TIFF block (EXIF) cut down, in place, to the one tag a viewer needs: the orientation.

A TIFF block is a header and directories of 12-byte entries, whose values (or offsets to
them) readers follow: IFD0 and the chain after it, the Exif, GPS and Interop directories,
SubIFDs, a maker's notes, a JPEG thumbnail with EXIF of its own, XMP, IPTC and Photoshop
blocks under tags of their own. Readers do not agree on which pointers they follow (a
review's exiftool found a place through five routes a walker of the usual ones missed:
a SubIFD, IFD1's Exif directory, IFD2, the first of two Exif pointers, an Exif directory
inside another). So nothing of the block is kept but the orientation of IFD0 (without it
a phone's photo shows on its side): a new block holding that alone is written over the
start of the old one, and the rest is zeroed, so the block keeps its length and whatever
holds it (a JPEG segment, a PNG or WebP chunk, a multi-picture file's offsets) stays
valid. Used by the location stripping (studio/metadata.py) for JPEG, PNG and WebP alike.
"""

import struct

ORIENTATION_TAG = 0x0112
SHORT, LONG = 3, 4  # the TIFF field types of a 2-byte and a 4-byte value
TIFF_HEADER_SIZE = 8  # byte order, 42, where the first directory is
ENTRY = 12  # bytes in a directory entry: tag, type, count, value or offset
EMPTY_BLOCK = TIFF_HEADER_SIZE + 2 + 4  # a header and an IFD0 of no entries
ORIENTED_BLOCK = EMPTY_BLOCK + ENTRY  # a header and an IFD0 of one entry


def keep_orientation(tiff: bytearray, start: int = 0, end: int | None = None) -> bool:
    """Cut the TIFF block at `tiff[start:end]` down to IFD0's orientation, in place; True
    if that changed a byte.

    A block too short to hold an empty directory (14 bytes) cannot hold a place either,
    and is left as it is; anything else, broken or not a TIFF block at all, becomes a
    valid block of at most the orientation, in its own byte order (little-endian if none).
    """
    end = len(tiff) if end is None else min(end, len(tiff))
    room = end - start
    if room < EMPTY_BLOCK:
        return False
    order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[start : start + 2]))
    turn = orientation(tiff[:end], start, order) if order else None
    order = order or "<"
    kept = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, TIFF_HEADER_SIZE)
    if turn is not None and room >= ORIENTED_BLOCK:
        kept += struct.pack(order + "HHHIHHI", 1, ORIENTATION_TAG, SHORT, 1, turn, 0, 0)
    else:
        kept += struct.pack(order + "HI", 0, 0)
    block = kept + bytes(room - len(kept))
    if tiff[start:end] == block:
        return False
    tiff[start:end] = block
    return True


def orientation(tiff: bytearray, start: int, order: str) -> int | None:
    """Return IFD0's orientation (1-8, the first entry of it, as Pillow and exiftool read,
    a SHORT or a LONG), or None.

    At most as many entries are read as the block holds side by side: a review's block
    claimed 65,535 of them.
    """
    try:
        (ifd0,) = struct.unpack_from(order + "I", tiff, start + 4)
        first = start + ifd0 + 2
        if ifd0 < TIFF_HEADER_SIZE or first > len(tiff):
            return None
        (count,) = struct.unpack_from(order + "H", tiff, first - 2)
    except struct.error:
        return None
    entries = min(count, (len(tiff) - first) // ENTRY)
    for at in range(first, first + ENTRY * entries, ENTRY):
        tag, kind, n = struct.unpack_from(order + "HHI", tiff, at)
        if tag != ORIENTATION_TAG:
            continue
        if kind not in (SHORT, LONG) or n != 1:
            return None
        # A value of up to 4 bytes sits in the entry itself, from its first byte.
        (value,) = struct.unpack_from(order + ("H" if kind == SHORT else "I"), tiff, at + 8)
        return value if 1 <= value <= 8 else None
    return None
