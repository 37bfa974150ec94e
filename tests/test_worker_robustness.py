"""The worker outlives its hiccups, an fsync error is final, ownership cannot be bypassed."""

import asyncio
import logging
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connections

from studio import originals
from studio.ember.client import EmberClient
from studio.models import Task, TaskState
from studio.ownership import NotOwner, Ownership
from studio.store import move
from studio.worker import Worker, db
from tests.backup_parts import sqlite_only
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db


def originals_on_disk() -> set[str]:
    folder = Path(settings.AVATARS_DATA_DIR) / "originals"
    return {p.name for p in folder.iterdir()}


REAL_FSYNC = os.fsync


class BrokenFsync:
    """Stands in for os.fsync: fails every fsync of a file, or of a directory."""

    def __init__(self, broken: str) -> None:
        self.broken = broken
        self.calls: list[str] = []

    def __call__(self, fd: int) -> None:
        kind = "directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        self.calls.append(kind)
        if kind == self.broken:
            raise OSError(5, "Input/output error")
        REAL_FSYNC(fd)


# --- an fsync error is final for that copy -------------------------------------------


@pytest.mark.parametrize("broken", ["file", "directory"])
def test_it_ends_copy_failed_at_once_when_the_disk_does_not_confirm_the_copy(
    subject, ember, worker, monkeypatch, broken
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    before = originals_on_disk()
    monkeypatch.setattr(os, "fsync", BrokenFsync(broken))

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert "Input/output error" in task.error
    assert fake.file_route.call_count == 1  # no second try at a copy the disk refused
    assert fake.release_route.call_count == 0  # nothing acknowledged
    assert originals_on_disk() == before  # and no original left under its name
    assert task.result is not None  # the saved answer stays for a reconcile


@pytest.mark.parametrize("broken", ["file", "directory"])
def test_it_writes_the_original_afresh_when_a_copy_whose_fsync_failed_is_retried(
    subject, ember, worker, monkeypatch, broken
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    monkeypatch.setattr(os, "fsync", BrokenFsync(broken))
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED

    # A reconcile puts the task back to `copying` (as the engine's recovery does),
    # with the disk healthy again.
    working = BrokenFsync("nothing")
    monkeypatch.setattr(os, "fsync", working)
    move(task, TaskState.COPYING, expected=task.version, phase="Copying", error="")
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert working.calls == ["file", "directory"]  # written again, not trusted
    sha = fake.jobs["job_1"]["result"]["image"]["sha256"]
    assert originals.path_for(sha, ".png").read_bytes() == fake.images["img_1"]
    assert fake.file_route.call_count == 2
    assert fake.release_route.call_count == 1
    assert fake.charges(str(task.pk)) == 1


def test_it_still_retries_a_fetch_that_failed_in_transit(subject, ember, worker):
    import httpx

    fake = FakeEmber(ember)
    answers = iter([httpx.Response(503)])
    fake.file_route.mock(
        side_effect=lambda request, image_id: next(answers, None) or fake._file(request, image_id)
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.file_route.call_count == 2


# --- the worker outlives its database's hiccups ----------------------------------------


class Hiccups:
    """Wraps a database function so its first `times` calls raise, as a locked or lost DB does."""

    def __init__(self, real, times: int, error: Exception) -> None:
        self.real = real
        self.left = times
        self.error = error
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise self.error
        return self.real(*args, **kwargs)


def test_it_outlives_a_failing_pump_query_and_heartbeat_and_then_finishes_the_task(
    subject, ember, worker, monkeypatch, caplog
):
    from django.db import InterfaceError, OperationalError

    from studio.models import WorkerHeartbeat
    from studio.worker import loop

    fake = FakeEmber(ember)
    [task] = plan(subject)
    beat = Hiccups(loop._beat, 2, OperationalError("database is locked"))
    due = Hiccups(Worker._due, 2, InterfaceError("connection already closed"))
    monkeypatch.setattr(loop, "_beat", beat)
    monkeypatch.setattr(Worker, "_due", lambda self, limit: due(self, limit))
    worker.db_retry_delay = 0.01  # the back-off's first wait, shrunk for the test
    caplog.set_level(logging.WARNING, logger="studio.worker")

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.charges(str(task.pk)) == 1
    # The heartbeat got through in the end (else "no worker seen yet"); the stop marked it.
    assert WorkerHeartbeat.status().startswith("worker stopped for "), WorkerHeartbeat.status()
    assert beat.calls >= 3 and due.calls >= 3  # each was asked again after failing
    problems = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(problems) == 4
    assert sum("database is locked" in p for p in problems) == 2
    assert sum("connection already closed" in p for p in problems) == 2
    assert all("retrying in" in p for p in problems)


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_it_keeps_its_sqlite_connection_through_database_errors(
    subject, ember, worker, monkeypatch
):
    """Found by a review: reopened after each error (and at every tick), a SQLite connection
    mapped its shared-memory file again, which on a full disk killed the worker (SIGBUS)."""
    from django.db import OperationalError
    from django.db.backends.signals import connection_created

    from studio.worker import loop

    fake = FakeEmber(ember)
    [task] = plan(subject)
    due = Hiccups(Worker._due, 3, OperationalError("database or disk is full"))
    monkeypatch.setattr(Worker, "_due", lambda self, limit: due(self, limit))
    worker.db_retry_delay = 0.01
    opened: list[int] = []

    def note(**_kwargs: object) -> None:
        opened.append(threading.get_ident())

    connection_created.connect(note)
    try:
        drain(worker)
    finally:
        connection_created.disconnect(note)

    assert row_of(task).state == TaskState.DONE
    assert fake.charges(str(task.pk)) == 1
    assert due.calls >= 4
    assert len(opened) == len(set(opened)), (
        f"{len(opened)} SQLite connections opened on {len(set(opened))} threads while the "
        "database failed 3 times: each thread's should have been kept"
    )
    assert not loop._recyclable()


# --- ownership cannot be bypassed -----------------------------------------------------


def test_it_refuses_to_run_without_holding_the_lock(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)

    with pytest.raises(NotOwner, match="must hold the database's locks"):
        async_to_sync(worker.run)(once=True)

    task.refresh_from_db()
    assert task.state == TaskState.QUEUED
    assert fake.submits == []


@pytest.mark.django_db(transaction=True)
def test_it_releases_the_lock_only_after_the_write_in_flight_returned(subject, ember, monkeypatch):
    FakeEmber(ember)
    plan(subject)
    events: list[str] = []
    writing = threading.Event()

    def slow_write(task: Task) -> None:
        events.append("write started")
        writing.set()
        time.sleep(0.5)
        events.append("write returned")

    class SlowWriter(Worker):
        async def submit(self, task: Task) -> bool:
            await db(slow_write)(task)
            return False

    real_release = Ownership.release

    def release(self: Ownership) -> None:
        events.append("lock released")
        real_release(self)

    monkeypatch.setattr(Ownership, "release", release)
    worker = SlowWriter(client=EmberClient(), workers=1, poll_interval=0, tick=0)

    async def forced_stop() -> None:
        runner = asyncio.create_task(worker.run())
        await asyncio.to_thread(writing.wait, 10)
        worker.request_stop()
        worker.request_stop()  # the second signal: cancel what is in flight
        await runner

    # As `run_worker` does it: asyncio.run with no outer sync thread, then unlock.
    worker.lock()
    try:
        asyncio.run(forced_stop())
    finally:
        worker.unlock()
        # That database thread outlives the loop: close its connection, not the test's.
        asyncio.run(db(connections.close_all)())

    assert events == ["write started", "write returned", "lock released"]
