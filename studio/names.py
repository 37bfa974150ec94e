"""Names people give things (subjects, sets, batches' titles): text someone can read.

A name is trimmed, loses the controls that reorder the text around it (an override that
turned "photo_gpj.exe" into "photo_exe.jpg" on screen), has its control characters and
line breaks made spaces (a bell or a new line is nothing a name shows), and is empty
when nothing in it can be seen: a review named a subject with an override, a zero-width
space and a joiner and was answered 201, a subject nobody could find on the page.
Joiners inside a name stay: a family's emoji are drawn with them. A zero-width space,
a word joiner or a byte-order mark anywhere, and format characters at either end, go:
"Holiday" and "Holiday" with a zero-width space after it looked one name and were two,
and the warning about two sets of one name missed them. A name is kept composed (NFC):
an "é" typed as "e" and an accent is the "é" typed as one character.
"""

import os
import unicodedata

# Embeddings, overrides and isolates (and their ends): they reorder what follows them.
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
# Invisible, and never needed to write a name (unlike the joiners, U+200C and U+200D).
SPACERS = dict.fromkeys([0x200B, 0x2060, 0xFEFF])
BREAKS = ("Cc", "Zl", "Zp")  # controls (tab, new line, bell, …) and line/paragraph separators
JOINERS = ("\u200c", "\u200d")
EXTENSION_MOST = 16  # characters of a file name's extension kept when the name is cut
UNSEEN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me")  # no glyph of their own


def cleaned(value: object) -> str:
    """Return `value` as a name: trimmed, without bidi controls, "" if none of it shows."""
    if not isinstance(value, str):
        return ""
    name = "".join(
        " " if unicodedata.category(char) in BREAKS else char
        for char in unicodedata.normalize("NFC", value.translate(BIDI_CONTROLS | SPACERS))
    )
    name = _trimmed(name)
    if all(unicodedata.category(char) in UNSEEN for char in name):
        return ""
    return name


def _trimmed(name: str) -> str:
    """Return `name` without spaces or format characters (a joiner, say) at either end."""
    start, end = 0, len(name)
    while start < end and _at_an_end(name[start]):
        start += 1
    while end > start and _at_an_end(name[end - 1]):
        end -= 1
    return name[start:end]


def _at_an_end(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) in ("Cf", "Zs")


def cut(name: str, most: int) -> str:
    """Return the start of a cleaned `name`, at most `most` long, cut before an accent, a
    joiner or a variation selector rather than after it, so no letter loses its accent
    and no emoji its half; still a name (cleaned again)."""
    end = min(len(name), most)
    while 0 < end < len(name) and _joins_before(name[end - 1], name[end]):
        end -= 1
    return cleaned(name[:end]) or name[:most]


def file_name(value: object, most: int = 255) -> str:
    """Return `value` as a file name: cleaned as a name, and, when longer than `most`, its
    start cut (as `cut` does) before its extension, which stays: a 300-character
    "….png" was stored cut to 255 without its ".png" (a review)."""
    name = cleaned(value)
    if len(name) <= most:
        return name
    stem, extension = os.path.splitext(name)
    if not stem or len(extension) > EXTENSION_MOST:
        return cut(name, most)
    return cut(stem, most - len(extension)) + extension


def _joins_before(before: str, after: str) -> bool:
    """Say whether a cut between `before` and `after` would split one thing that shows."""
    return (
        unicodedata.category(after) in ("Mn", "Mc", "Me")
        or after in JOINERS
        or before in JOINERS
        or 0xFE00 <= ord(after) <= 0xFE0F
        or 0x1F3FB <= ord(after) <= 0x1F3FF  # a skin tone
    )


def generated(provider_label: str, frame: str, ordinal: int) -> str:
    """Name an image Ember made, as its results show it: "GPT Image · image #1".

    The batch page shows the same words under the image still on its way.
    """
    return f"{provider_label} · {frame} #{ordinal}"
