"""An ICC colour profile's words emptied in place: its description, copyright and device
names are any text (a review's held a place, which exiftool shows by default).

A profile is a 128-byte header, a tag count and a table of tags (signature, offset, size).
The tags of a text type (`desc`, `text`, `mluc`) keep their type and are zeroed after it,
which reads as empty text; the colour tags are untouched, so the picture shows as before.
The profile's ID (an MD5 of the rest) is zeroed too once anything changed: zero says "not
computed", where a stale one would say the profile is damaged.
"""

import struct

HEADER = 128  # bytes before the tag count
TAG = 12  # signature, offset, size
TEXT_TYPES = (b"desc", b"text", b"mluc")  # the type signatures that hold words
TYPE_HEAD = 8  # a tag's type signature and its 4 reserved bytes
PROFILE_ID = slice(84, 100)


def blank_text(profile: bytearray, start: int = 0, end: int | None = None) -> bool:
    """Zero the words of the profile at `profile[start:end]` in place; True if any changed.

    A profile too short for its own table is left as it is (a decoder ignores it, and the
    words it could hold would be out of any tag's reach).
    """
    end = len(profile) if end is None else min(end, len(profile))
    if end - start < HEADER + 4:
        return False
    (count,) = struct.unpack_from(">I", profile, start + HEADER)
    count = min(count, (end - start - HEADER - 4) // TAG)
    changed = False
    table_end = start + HEADER + 4 + TAG * count  # no tag's words are zeroed over the table
    for entry in range(start + HEADER + 4, table_end, TAG):
        _signature, offset, size = struct.unpack_from(">4sII", profile, entry)
        first, last = start + offset, min(end, start + offset + size)
        if first < table_end or last - first <= TYPE_HEAD:
            continue
        if bytes(profile[first : first + 4]) not in TEXT_TYPES:
            continue
        if any(profile[first + TYPE_HEAD : last]):
            profile[first + TYPE_HEAD : last] = bytes(last - first - TYPE_HEAD)
            changed = True
    if changed:
        profile[start + PROFILE_ID.start : start + PROFILE_ID.stop] = bytes(16)
    return changed
