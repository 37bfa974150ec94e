"""Row ids as people and programs send them: ASCII digits only, within the column's range.

`str.isdigit()` is not enough: it accepts "²" and other Unicode digits, which `int()`
then refuses or reads as a different number, and an id past the database's 64-bit
column raises inside the query instead of naming no row.
"""

import re

MAX_ID = 2**63 - 1  # the largest row id any database here can hold
MAX_DIGITS = 100  # of an id as written; past it, a string or a number is no id at all
# As a row's id is written, and only so: "01" named row 1 and "1" did too (a review), one
# row under many names; a leading zero makes a string no id.
_DIGITS = re.compile(r"[1-9][0-9]{0,18}")
# A UUID as Avatars writes it: Django also reads upper case, no dashes, braces and
# "urn:uuid:", each one more name for the same batch or task (a review).
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def row_id(value: object) -> int | None:
    """Return `value` as a row id some row could have, or None when it cannot be one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        number = int(value)
    else:
        return None
    return number if 0 < number <= MAX_ID else None


def looks_like_id(value: object) -> bool:
    """Say whether `value` is written as a row id (ASCII digits or an int), in range or not.

    A JSON number may have thousands of digits; it is held to the length a string is.
    """
    if isinstance(value, str):
        canonical = value == "0" or not value.startswith("0")
        return value.isascii() and value.isdigit() and canonical and len(value) <= MAX_DIGITS
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return abs(value) < 10**MAX_DIGITS


def canonical_uuid(value: object) -> bool:
    """Say whether `value` is a UUID written as Avatars writes one (lower case, dashed)."""
    return isinstance(value, str) and _UUID.fullmatch(value) is not None
