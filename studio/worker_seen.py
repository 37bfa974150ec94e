"""What people are told of the worker, from its heartbeat row and its file in the data dir.

The worker rewrites its row every few seconds and touches `ALIVE_FILE` beside it
(studio/worker/heartbeat.py). A full database disk refuses the row while the worker runs
on; the file's time still changes there, so the pages say the worker cannot write
instead of "no worker seen" (a review filled the disk and was told to start a worker
that was running).
"""

from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from studio.clock import how_long

STALE_AFTER = 15  # seconds without a beat after which the worker counts as gone
ALIVE_FILE = "worker.alive"  # in the data dir: its time is the worker's last pass
RUNNING = "worker running"
CANNOT_WRITE = "worker cannot write to the database"


class Beat(Protocol):
    seen_at: datetime
    stopped: bool


def status(beat: Beat | None) -> str:
    """Say, for people, whether a worker is driving tasks right now, by its last `beat`."""
    now = timezone.now()
    if beat is None:
        # One that started on a full disk has never written its row.
        return CANNOT_WRITE if alive_on_disk(now) else "no worker seen yet"
    if not beat.stopped and (now - beat.seen_at).total_seconds() <= STALE_AFTER:
        return RUNNING
    # How long first: a family reads "for 5 minutes" at once, whatever their time zone.
    gone = "worker stopped" if beat.stopped else "no worker seen"
    if not beat.stopped and alive_on_disk(now):
        gone = CANNOT_WRITE  # its row refused (a full disk), its file's time not
    since = timezone.localtime(beat.seen_at)  # in the studio's zone, named
    return f"{gone} for {how_long(beat.seen_at, now)} (since {since:%Y-%m-%d %H:%M:%S %Z})"


def alive_on_disk(now: datetime) -> bool:
    """Say whether a worker touched its file in the data dir within STALE_AFTER."""
    try:
        touched = (settings.AVATARS_DATA_DIR / ALIVE_FILE).stat().st_mtime
    except OSError:
        return False  # never touched here (a worker on another machine), or unreadable
    return abs(now.timestamp() - touched) <= STALE_AFTER
