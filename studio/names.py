"""Names people give things (subjects, sets, batches' titles): text someone can read.

A name is trimmed, loses the controls that reorder the text around it (an override that
turned "photo_gpj.exe" into "photo_exe.jpg" on screen), has its control characters and
line breaks made spaces (a bell or a new line is nothing a name shows), and is empty
when nothing in it can be seen: a review named a subject with an override, a zero-width
space and a joiner and was answered 201, a subject nobody could find on the page.
Joiners inside a name stay: a family's emoji are drawn with them.
"""

import unicodedata

# Embeddings, overrides and isolates (and their ends): they reorder what follows them.
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
BREAKS = ("Cc", "Zl", "Zp")  # controls (tab, new line, bell, …) and line/paragraph separators
UNSEEN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me")  # no glyph of their own


def cleaned(value: object) -> str:
    """Return `value` as a name: trimmed, without bidi controls, "" if none of it shows."""
    if not isinstance(value, str):
        return ""
    name = "".join(
        " " if unicodedata.category(char) in BREAKS else char
        for char in value.translate(BIDI_CONTROLS)
    ).strip()
    if all(unicodedata.category(char) in UNSEEN for char in name):
        return ""
    return name
