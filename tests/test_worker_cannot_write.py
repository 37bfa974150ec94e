"""A worker that runs while the database refuses its heartbeat row (a full disk).

Found by a review that filled the database's disk: the worker ran on, every write of it
refused, and the batch page said "No worker seen… Whoever runs Avatars here can start it
again", sending the operator to start a worker that was running.
"""

import os
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone

from studio.models import WorkerHeartbeat
from studio.worker import loop
from tests.factories import plan
from tests.sqlite_errors import sqlite_error
from tests.studio_pages import text

# The worker's database thread runs on its own connection: real commits, no test transaction.
pytestmark = pytest.mark.django_db(transaction=True)

CANNOT = "worker cannot write to the database"


def alive_file_touched(seconds_ago: float) -> None:
    path = settings.AVATARS_DATA_DIR / WorkerHeartbeat.ALIVE_FILE
    path.touch()
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


def last_beat(minutes_ago: int, *, stopped: bool = False) -> None:
    seen = timezone.now() - timedelta(minutes=minutes_ago)
    WorkerHeartbeat.objects.create(
        started_at=seen, seen_at=seen, pid=42, host="box", stopped=stopped
    )


def test_a_stale_row_beside_a_fresh_file_is_a_worker_that_cannot_write():
    last_beat(5)
    alive_file_touched(2)

    assert WorkerHeartbeat.status().startswith(f"{CANNOT} for 5\xa0minutes (since ")


def test_a_worker_that_never_wrote_its_row_but_touches_its_file_cannot_write():
    alive_file_touched(0)

    assert WorkerHeartbeat.status() == CANNOT


@pytest.mark.parametrize(
    ("stopped", "said"), [(False, "no worker seen for 5\xa0minutes"), (True, "worker stopped")]
)
def test_a_stale_file_or_a_clean_stop_says_what_it_said_before(stopped, said):
    """A killed worker's file goes stale with its row; a stopped one said so itself."""
    last_beat(5, stopped=stopped)
    alive_file_touched(WorkerHeartbeat.STALE_AFTER + 5 if not stopped else 0)

    assert WorkerHeartbeat.status().startswith(said), WorkerHeartbeat.status()


def test_the_batch_page_says_the_running_worker_cannot_write(
    subject, ember, worker, signed_in, monkeypatch, tmp_path
):
    """The real worker loop, its heartbeat refused by SQLite's own "full" error."""
    [task] = plan(subject)
    last_beat(5)  # before the disk filled
    full = sqlite_error(tmp_path, "full")

    def refused(*_args: object) -> None:
        raise full

    monkeypatch.setattr(loop, "_beat", refused)
    monkeypatch.setattr(loop, "DB_RETRY_MAX", 0.05)  # its back-off, shrunk for the test
    worker.db_retry_delay = 0.01
    worker.lock()
    running = threading.Thread(target=async_to_sync(worker.run))
    running.start()
    try:
        alive = settings.AVATARS_DATA_DIR / WorkerHeartbeat.ALIVE_FILE
        deadline = time.monotonic() + 10
        while not alive.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        page = text(signed_in.get(f"/batches/{task.batch_id}/"))
    finally:
        worker.stopping = True  # seen at its next pass, 50 ms away at most
        running.join(timeout=10)
        worker.unlock()

    assert not running.is_alive()
    assert "Worker cannot write to the database for 5 minutes" in page, page
    assert "the database refuses what it writes (its disk may be full)" in page, page
    assert "can start it again" not in page
