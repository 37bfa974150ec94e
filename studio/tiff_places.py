"""Places held in a TIFF block (EXIF), emptied in place: every offset in the block stays valid.

A TIFF block is a header and directories of 12-byte entries, whose values (or offsets to
them) readers follow. The GPS directory holds where a photo was taken; other metadata
blocks can ride inside under their own tags (XMP, IPTC, Photoshop resources). Used by the
location stripping (studio/metadata.py) for a JPEG's, PNG's and WebP's EXIF alike.
"""

import struct

GPS_IFD_TAG = 0x8825
# IFD1's JPEG thumbnail: where it starts in the block, and how long it is. A thumbnail is a
# JPEG of its own, whose EXIF can hold the place again (a review's, read by exiftool).
THUMBNAIL_TAG, THUMBNAIL_LENGTH_TAG = 0x0201, 0x0202
THUMBNAILS = 16  # thumbnail offsets looked at: a directory names one, a crafted one a few
THUMBNAIL_STEPS = 1024  # segments and fill bytes walked in a thumbnail before it is zeroed
EXIF_IFD_TAG = 0x8769
INTEROP_IFD_TAG = 0xA005
# Tags whose data is another metadata block, which readers show: XMP (a place among its
# properties), IPTC (city, country) and Photoshop's resources (IPTC again).
EMBEDDED = {0x02BC, 0x83BB, 0x8649}
# TIFF field type -> bytes per value (the types EXIF uses).
TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8}
TIFF_HEADER_SIZE = 8  # byte order, 42, where the first directory is
SHORT = 3  # the TIFF field type of a 2-byte value


def empty_gps(tiff: bytearray, start: int = 0) -> bool:
    """Empty the GPS directories of the TIFF block at `tiff[start:]` in place, and blank the
    metadata blocks held under its tags (`EMBEDDED`) and in its JPEG thumbnail; True if
    there was any.

    Each directory's count is set to 0 first, so that a reader finds it empty even when
    its entries run past the end of the block; the entries that can be reached are then
    zeroed with their data. Every directory a GPS entry points at is emptied: a reader
    takes the pointer whatever its type (a SHORT's in two bytes) and, when the tag comes
    twice, the last one. A block too broken to find a directory in is left as it is.
    """
    try:
        order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[start : start + 2]))
        if order is None:
            return False
        searched = _directories(tiff, start, order)
        embedded = _blank_embedded(tiff, start, searched, order)
        embedded = _blank_thumbnail(tiff, start, order) or embedded
        directories = _gps_directories(tiff, start, searched, order)
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
    return bool(directories) or embedded


def _gps_directories(tiff: bytearray, start: int, searched: list[int], order: str) -> list[int]:
    """Return where each GPS directory's count is, as the `searched` directories point.

    A GPS pointer is looked for in every directory a reader follows one in (a review's
    pointer in IFD1 was shown by exiftool whole): IFD0, IFD1, Exif and Interop.
    """
    found = [
        start + gps
        for directory in searched
        for gps in _entry_values(tiff, directory, order, GPS_IFD_TAG)
        if _inside(tiff, start, gps)
    ]
    return list(dict.fromkeys(found))


def _inside(tiff: bytearray, start: int, offset: int) -> bool:
    """Say whether a directory may be at `offset`: not in the TIFF header, not past the block."""
    return offset >= TIFF_HEADER_SIZE and start + offset + 2 <= len(tiff)


def _directories(tiff: bytearray, start: int, order: str) -> list[int]:
    """Return where the block's IFD0, IFD1, Exif and Interop directories are (those found)."""
    (ifd0,) = struct.unpack_from(order + "I", tiff, start + 4)
    if not _inside(tiff, start, ifd0):
        return []
    found = [start + ifd0]
    ifd1 = _ifd1(tiff, start, ifd0, order)
    if ifd1 is not None:
        found.append(ifd1)
    for exif in _entry_values(tiff, start + ifd0, order, EXIF_IFD_TAG)[-1:]:
        if _inside(tiff, start, exif):
            found.append(start + exif)
            interop = _entry_values(tiff, start + exif, order, INTEROP_IFD_TAG)[-1:]
            found += [start + at for at in interop if _inside(tiff, start, at)]
    return list(dict.fromkeys(found))


def _ifd1(tiff: bytearray, start: int, ifd0: int, order: str) -> int | None:
    """Return where IFD1 is (the directory after IFD0: the thumbnail's), or None."""
    (count,) = struct.unpack_from(order + "H", tiff, start + ifd0)
    after = start + ifd0 + 2 + 12 * count  # where IFD0 says the next directory is
    if after + 4 > len(tiff):
        return None
    (ifd1,) = struct.unpack_from(order + "I", tiff, after)
    return start + ifd1 if ifd1 and _inside(tiff, start, ifd1) else None


def _blank_thumbnail(tiff: bytearray, start: int, order: str) -> bool:
    """Zero, in place, what the JPEG thumbnail IFD1 points at says beside its pixels: its
    application segments but APP0 (EXIF, XMP and the like) and its comments; True if any.

    Each segment keeps its marker and length, so the thumbnail stays a JPEG readers decode.
    """
    (ifd0,) = struct.unpack_from(order + "I", tiff, start + 4)
    ifd1 = _ifd1(tiff, start, ifd0, order) if _inside(tiff, start, ifd0) else None
    if ifd1 is None:
        return False
    # Every offset the tag gives, with the longest length given: readers differ in which of
    # two entries they follow (a re-review's exiftool took the first, this the last).
    offsets = _entry_values(tiff, ifd1, order, THUMBNAIL_TAG)
    lengths = _entry_values(tiff, ifd1, order, THUMBNAIL_LENGTH_TAG)
    blanked = False
    for offset in dict.fromkeys(offsets[:THUMBNAILS]):
        pos = start + offset
        if offset < TIFF_HEADER_SIZE or tiff[pos : pos + 2] != b"\xff\xd8":
            continue
        end = min(len(tiff), pos + max(lengths)) if lengths else len(tiff)
        blanked = _blank_segments(tiff, pos, end) or blanked
    return blanked


def _blank_segments(jpeg: bytearray, start: int, end: int) -> bool:
    """Zero the bodies of the APP1-APP15 and comment segments of the JPEG at
    `jpeg[start:end]`, up to its first scan; True if any.

    Past `THUMBNAIL_STEPS` segments and fill bytes (no thumbnail has more: a re-review's
    6.3 million empty segments cost 3.5 s of CPU) the whole thumbnail is zeroed instead.
    """
    blanked = False
    pos = start + 2  # past its start of image
    for _step in range(THUMBNAIL_STEPS):
        if pos + 4 > end or jpeg[pos] != 0xFF or jpeg[pos + 1] in (0xDA, 0xD9):
            return blanked  # the scan, the end, or bytes no reader takes for a segment
        marker = jpeg[pos + 1]
        if marker == 0xFF:  # a fill byte
            pos += 1
            continue
        (length,) = struct.unpack_from(">H", jpeg, pos + 2)
        if length < 2:
            return blanked
        if 0xE1 <= marker <= 0xEF or marker == 0xFE:
            body = min(pos + 2 + length, end)
            jpeg[pos + 4 : body] = bytes(max(0, body - pos - 4))
            blanked = True
        pos += 2 + length
    jpeg[start:end] = bytes(end - start)
    return True


def _blank_embedded(tiff: bytearray, start: int, directories: list[int], order: str) -> bool:
    """Zero the data of the entries that hold another metadata block (`EMBEDDED`: XMP,
    IPTC, Photoshop resources) in `directories`, in place; True if any. The entries stay."""
    blanked = False
    for directory in directories:
        (count,) = struct.unpack_from(order + "H", tiff, directory)
        for entry in range(directory + 2, min(directory + 2 + 12 * count, len(tiff) - 11), 12):
            tag, kind, n, offset = struct.unpack_from(order + "HHII", tiff, entry)
            if tag not in EMBEDDED:
                continue
            size = TYPE_SIZES.get(kind, 1) * n
            if size <= 4:
                tiff[entry + 8 : entry + 12] = bytes(4)
            elif offset >= TIFF_HEADER_SIZE and start + offset + size <= len(tiff):
                tiff[start + offset : start + offset + size] = bytes(size)
            blanked = True
    return blanked


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
