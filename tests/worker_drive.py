"""Drive the worker one step at a time, for the worker's tests of several steps."""

import pytest
from asgiref.sync import async_to_sync
from django.db import DatabaseError

from studio import engine
from studio.models import Attempt, Task
from studio.worker import Worker


def assert_sent_once_under_its_key(task: Task) -> Attempt:
    """Check the clip's send is one `unknown` attempt under its key and cannot be cancelled."""
    [attempt] = task.attempts.all()
    assert (attempt.outcome, attempt.ember_job_id, attempt.idempotency_key) == (
        Attempt.Outcome.UNKNOWN,
        "",
        task.idempotency_key,
    )
    with pytest.raises(engine.TooLate, match="already been sent to Ember"):
        engine.cancel_task(task=task)
    return attempt


async def fake_submit(worker: Worker, task: Task) -> None:
    """Make the submit a dead worker made before it could record it."""
    await worker.client.submit(
        {"source_metadata": {"task_id": str(task.pk)}, "provider": "openai", "model": None}
    )


def submit_once(worker: Worker, task: Task) -> Task:
    async_to_sync(worker.submit)(task)
    task.refresh_from_db()
    return task


def drive_once(worker: Worker, task: Task) -> Task:
    """Drive one task as the pump would, until it rests or waits."""
    async_to_sync(worker.drive)(str(task.pk))
    task.refresh_from_db()
    return task


def database_error(*args, **kwargs):
    raise DatabaseError("disk I/O error")
