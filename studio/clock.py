"""How long something lasts, in a person's words, said the same way on every page.

The worker line ("no worker seen for 5 minutes") and a waiting task's row ("next try
in 35 s") both say a span this way: in seconds under a minute, where Django's
`timesince` says "0 minutes", else in its largest unit.
"""

import math
from datetime import datetime

from django.utils.timesince import timesince

MINUTE = 60  # seconds; under it a span is said in seconds


def how_long(start: datetime, end: datetime) -> str:
    """Say the span from `start` to `end`: "35 s" under a minute, else "5 minutes"."""
    seconds = (end - start).total_seconds()
    if seconds < MINUTE:
        # Rounded up: a wait of 34.98 s read a moment after it was set is "35 s".
        return f"{max(0, math.ceil(seconds))} s"
    return timesince(start, end, depth=1)
