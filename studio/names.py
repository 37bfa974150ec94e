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

import unicodedata

# Embeddings, overrides and isolates (and their ends): they reorder what follows them.
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
# Invisible, and never needed to write a name (unlike the joiners, U+200C and U+200D).
SPACERS = dict.fromkeys([0x200B, 0x2060, 0xFEFF])
BREAKS = ("Cc", "Zl", "Zp")  # controls (tab, new line, bell, …) and line/paragraph separators
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
