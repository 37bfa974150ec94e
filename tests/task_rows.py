"""A task's row as the database holds it now, and another writer moving it behind a copy."""

from django.db.models import F
from django.utils import timezone

from studio.models import Task, TaskState


def row_of(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def second_writer_moves(task: Task, state: TaskState) -> None:
    """Another process (the worker) writes the row behind this copy's back."""
    Task.objects.filter(pk=task.pk).update(
        state=state,
        next_attempt_at=timezone.now() if state in (TaskState.QUEUED,) else None,
        version=F("version") + 1,
    )
