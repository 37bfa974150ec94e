"""The worker's heartbeat row (docs/operations.md): alive every few seconds, stopped at the end.

A running worker rewrites the one row every HEARTBEAT_INTERVAL seconds; a clean stop marks
it stopped, so people see at once that no worker runs. A killed worker writes nothing: its
last beat goes stale after WorkerHeartbeat.STALE_AFTER seconds.
"""

import os
import socket
from datetime import datetime

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
