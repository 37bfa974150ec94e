"""The worker's heartbeat row (docs/operations.md): alive every few seconds, stopped at the end.

A running worker rewrites the one row every HEARTBEAT_INTERVAL seconds; a clean stop marks
it stopped, so people see at once that no worker runs. A killed worker writes nothing: its
last beat goes stale after WorkerHeartbeat.STALE_AFTER seconds.

Beside the row, each pass touches a file in the data dir (`touch`): on a full database
disk the row is refused while the worker runs on, and the pages then said "no worker
seen" (a review filled the disk); a file's time still changes there, so they can say
that the worker runs but cannot write.
"""

import contextlib
import os
import socket
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from studio.models import WorkerHeartbeat


def beat(started_at: datetime) -> None:
    """Write the worker's "still alive" row: when it started, when it was last seen, where."""
    WorkerHeartbeat.objects.update_or_create(
        pk=1,
        defaults={
            "started_at": started_at,
            "seen_at": timezone.now(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "stopped": False,
        },
    )


def record_stop() -> None:
    """Mark this worker's row stopped, seen last now; a row another worker wrote stays."""
    WorkerHeartbeat.objects.filter(pk=1, pid=os.getpid(), host=socket.gethostname()).update(
        stopped=True, seen_at=timezone.now()
    )


def touch() -> None:
    """Note in the data dir that the worker still passes, where a full disk lets it."""
    # A read-only disk refuses it: the pages say "no worker seen", as they did before.
    with contextlib.suppress(OSError):
        (settings.AVATARS_DATA_DIR / WorkerHeartbeat.ALIVE_FILE).touch()
