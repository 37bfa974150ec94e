"""The worker when its database is out of reach part way through a step (a review's, on
PostgreSQL restarted under it): the task goes on first once it is back, and the log says
so in one line a task instead of two tracebacks.
"""

import asyncio
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from asgiref.sync import async_to_sync

from studio.models import Task, TaskState
from studio.worker import Worker, loop, steps
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber
from tests.sqlite_errors import sqlite_error

pytestmark = pytest.mark.django_db


def out_of_reach_once(real, exc: BaseException):
    """Wrap a database function so that its first call fails as a database out of reach."""
    calls: list[int] = []

    def call(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return real(*args, **kwargs)

    return call


def test_a_task_at_ember_cut_off_by_the_database_goes_on_before_the_queue(
    subject, ember, monkeypatch, caplog, tmp_path: Path
):
    """Found by a review: its 60 s wait could not be written either, and it kept its place
    behind every task queued before it reached Ember; finished images sat uncopied."""
    fake = FakeEmber(ember)
    first, *_queued = plan(subject, candidates=3)
    exc = sqlite_error(tmp_path, "cannot open")
    monkeypatch.setattr(steps, "record_asset", out_of_reach_once(steps.record_asset, exc))
    caplog.set_level(logging.INFO, logger="studio.worker")
    one_slot = Worker(client=None, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0)

    drain(one_slot)

    first.refresh_from_db()
    assert first.state == TaskState.DONE, (first.state, first.phase)
    assert fake.charges(str(first.pk)) == 1
    # Its release went out before the next task's submit: it was not left behind the queue.
    calls = [(call.request.method, call.request.url.path) for call in ember.calls]
    release = next(i for i, (method, _path) in enumerate(calls) if method == "PATCH")
    submits = [i for i, (method, _path) in enumerate(calls) if method == "POST"]
    assert len(submits) == 3 and submits[0] < release < submits[1], calls
    said = [r for r in caplog.records if r.name == "studio.worker" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in said] == [
        f"task={first.pk} stopped mid-step: the database cannot be used "
        "(unable to open database file)"
    ]
    assert said[0].exc_info is None


def test_a_task_whose_row_cannot_be_read_again_yet_stays_first_in_line(
    subject, ember, monkeypatch, tmp_path: Path
):
    """Taken up again while the database is still out of reach, its row could not be read:
    it keeps its place at the head of the line for the next try."""
    fake = FakeEmber(ember)
    first, *_queued = plan(subject, candidates=3)
    exc = sqlite_error(tmp_path, "cannot open")
    monkeypatch.setattr(steps, "record_asset", out_of_reach_once(steps.record_asset, exc))
    rows = SimpleNamespace(get=out_of_reach_once(Task.objects.get, exc))
    monkeypatch.setattr(steps, "Task", SimpleNamespace(objects=rows))
    one_slot = Worker(client=None, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0)

    drain(one_slot)

    first.refresh_from_db()
    assert first.state == TaskState.DONE, (first.state, first.phase)
    calls = [call.request.method for call in ember.calls]
    release, submits = calls.index("PATCH"), [i for i, m in enumerate(calls) if m == "POST"]
    assert submits[0] < release < submits[1], calls
    assert fake.charges(str(first.pk)) == 1


def test_the_worker_logs_an_error_the_database_caused_in_one_line(tmp_path: Path):
    """The sweep's and a coroutine's errors go through the studio's handler, which says a
    database out of reach in one line (a review counted 1,130 lines over a 60 s stop)."""
    [handler] = logging.getLogger("studio").handlers
    try:
        raise sqlite_error(tmp_path, "cannot open")
    except Exception:
        record = logging.getLogger("studio.worker").makeRecord(
            "studio.worker", logging.ERROR, __file__, 1, "sweeping tasks failed", (), None
        )
        record.exc_info = sys.exc_info()

    assert handler.filter(record)
    said = handler.format(record)
    assert said.endswith(
        "ERROR studio.worker sweeping tasks failed: the database cannot be used "
        "(unable to open database file)"
    ), said
    assert "Traceback" not in said


def test_the_database_retry_waits_at_most_8_s(subject, ember, monkeypatch):
    """Found by a review: the wait doubled to 30 s, and for up to 30 s after the database
    was back the studio said "No worker seen" (after 15 s without a heartbeat)."""
    from django.db import OperationalError

    FakeEmber(ember)
    plan(subject)
    failing = {"left": 7}
    real_due = Worker._due

    def due(self, limit):
        if failing["left"]:
            failing["left"] -= 1
            raise OperationalError("database is locked")
        return real_due(self, limit)

    waits: list[float] = []
    worker = Worker(client=None, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0)
    monkeypatch.setattr(Worker, "_due", due)

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(worker, "_sleep", no_wait)
    drain(worker)

    retries = [w for w in waits if w >= loop.DB_RETRY_DELAY]
    assert retries[:7] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0], waits


def test_a_task_the_database_stopped_waits_its_turn_before_it_is_driven_again(
    subject, ember, monkeypatch, tmp_path: Path
):
    """Found by a full-disk review: such a task was read as due again by the next pass and
    driven again at once, over and over (2,000 log lines a second for 8-16 s) until the
    heartbeat's own write failed and the loop's back-off began."""
    FakeEmber(ember)
    [task] = plan(subject)
    exc = sqlite_error(tmp_path, "cannot open")
    driven: list[int] = []

    def out_of_reach(*_args: object, **_kwargs: object) -> None:
        driven.append(1)
        raise exc

    monkeypatch.setattr(steps, "record_asset", out_of_reach)
    worker = Worker(client=None, workers=1, poll_interval=0, tick=30.0, fetch_retry_delay=0)

    async def passes(count: int) -> None:
        for _ in range(count):
            await worker.pump()
            await asyncio.gather(*worker.in_hand.values(), return_exceptions=True)

    async_to_sync(passes)(20)

    assert len(driven) == 1, f"driven {len(driven)} times in 20 passes within its 30 s wait"
    assert str(task.pk) in worker.interrupted  # it goes on first once its wait is over
