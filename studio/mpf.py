"""A multi-picture file's index (CIPA DC-007, "MPF", in an APP2 segment of its first picture).

A phone's MPO (depth, panoramas) or an Ultra HDR photo (its gain map) holds further
pictures after the first, each found by the index's offset and size: the location
stripping looks at each as it looks at the first, and lets go of what follows the last
(a motion photo's video), whose bytes no offset names.
"""

import struct

MAX_PICTURES = 64  # pictures an index may name: a phone's have a few
MP_ENTRY = 0xB002  # the tag whose data lists each picture: 16 bytes an entry
ENTRY_SIZE = 16  # attributes, size, offset (4 bytes each), two dependent pictures (2 each)
MPF_ID = b"MPF\x00"


def pictures(data: bytes, segment: int) -> list[tuple[int, int]] | None:
    """Return where each picture after the first starts and ends, by start, as the index in
    the APP2 segment at `data[segment:]` names them; None when the index cannot be read.

    Offsets count from the index's TIFF header (after "MPF\\0"), as Pillow reads them.
    """
    try:
        end = min(len(data), segment + 2 + (data[segment + 2] << 8 | data[segment + 3]))
        base = segment + 4 + len(MPF_ID)
        order = {b"II": "<", b"MM": ">"}.get(data[base : base + 2])
        if order is None:
            return None
        (ifd,) = struct.unpack_from(order + "I", data, base + 4)
        (count,) = struct.unpack_from(order + "H", data, base + ifd)
        lists = []
        for entry in range(base + ifd + 2, base + ifd + 2 + 12 * min(count, 32), 12):
            tag, _kind, size, offset = struct.unpack_from(order + "HHII", data, entry)
            if tag == MP_ENTRY:  # every list the index holds: readers differ in which they take
                lists.append(_listed(data, order, base, base + offset, size // ENTRY_SIZE, end))
    except (IndexError, struct.error):
        return None
    return merged(lists)


def merged(lists: "list[list[tuple[int, int]] | None]") -> list[tuple[int, int]] | None:
    """Return every picture the readable `lists` name, one per start (the longest), by
    start; None when none is readable, or when they name more than MAX_PICTURES in all.

    Each picture is walked to its end: a re-review's one index of 32 lists of 64 entries,
    one start under many sizes, had a 22 MB scan walked 2,016 times (14 s an index).
    """
    readable = [found for found in lists if found is not None]
    ends: dict[int, int] = {}
    for start, end in (picture for found in readable for picture in found):
        ends[start] = max(end, ends.get(start, end))
    if not readable or len(ends) > MAX_PICTURES:
        return None
    return sorted(ends.items())


def _listed(
    data: bytes, order: str, base: int, first: int, count: int, end: int
) -> list[tuple[int, int]] | None:
    """Read `count` entries from `first` (within the segment, before `end`)."""
    if not 0 < count <= MAX_PICTURES or first + ENTRY_SIZE * count > end:
        return None
    found = []
    for entry in range(first + ENTRY_SIZE, first + ENTRY_SIZE * count, ENTRY_SIZE):
        _attributes, size, offset = struct.unpack_from(order + "III", data, entry)
        start = base + offset
        if offset and start < len(data):  # one pointing nowhere names no picture
            # A size is a hint: Pillow reads a picture from its offset on, and writes the
            # last one's size as the sum of all but the first (a three-picture MPO's).
            found.append((start, min(start + size, len(data))))
    return sorted(found)
