"""A job or an image Ember names for a second send (docs/design.md §6.5, §6.7).

Every accepted image submit is a new job, and a clip's first send under its key too
(docs/ember.md): a job id Ember names again belongs to the send it named it for first.
Following it here would file that send's image as this task's result, and leave the job
this send may have paid for unlooked-for. The task rests `uncertain` instead, its attempt
unknown and without a job, as after a lost answer: the history search then looks for
the job Ember made for it, and nothing more is sent.

Likewise a job's result naming an image another task's original already is: it is not
filed as this task's, nor released again, and the task rests `uncertain` saying so; its
own image, if Ember made one, is still protected there (a review's Ember gave three jobs
one image: three tasks done, two paid originals never collected).
"""

import logging
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from studio import phrases
from studio.models import Asset, Attempt, Kind, Task, TaskState
from studio.store import move, update

log = logging.getLogger("studio.worker")


def holder(job_id: str, *, besides: Attempt | None) -> Attempt | None:
    """Return an earlier send Ember already answered with `job_id`, `besides` (the attempt
    this send belongs to: a clip re-sent under its key) aside."""
    if not _any(Attempt, "ember_job_id", job_id, "id", besides.pk if besides else None):
        return None  # as every send should be: one plain statement, no query compiled
    earlier = Attempt.objects.filter(ember_job_id=job_id)
    if besides is not None:
        earlier = earlier.exclude(pk=besides.pk)
    return earlier.select_related("task").first()


def _any(model: type[Model], column: str, value: str, other: str, own: object) -> bool:
    """Say whether a row of `model` has `value` in `column`, and is not `own` by field `other`.

    Asked once a send (and once a copy) on the worker's database thread: written out, it
    costs a fraction of what the ORM spends putting the same query together.
    """
    quote = connection.ops.quote_name
    sql = f"SELECT 1 FROM {quote(model._meta.db_table)} WHERE {quote(column)} = %s"
    params: list[Any] = [value]
    if own is not None:
        field = model._meta.get_field(other)
        assert isinstance(field, Field)
        sql += f" AND ({quote(field.column)} IS NULL OR {quote(field.column)} <> %s)"
        params.append(field.get_db_prep_value(own, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql + " LIMIT 1", params)
        return cursor.fetchone() is not None


def rest(
    task: Task,
    job_id: str,
    number: int,
    now: datetime,
    *,
    sent: Attempt | None,
    holder: Attempt,
) -> Task:
    """Record the send as unknown (no job) and rest `task` uncertain, saying whose job it is."""
    if holder.task_id == task.pk:
        whose = f"attempt {holder.number} of this task"
    else:
        other = holder.task
        whose = f"task {other.pk} ({other.provider} {other.frame} #{other.ordinal})"
    looked_for = (
        "Ember's history is searched for this task's own job"
        if task.kind == Kind.IMAGE
        else "reconcile it to look for this task's own job"
    )
    error = (
        f"Ember answered this send with job {job_id}, which {whose} already has: it is not "
        f"followed for this task. Nothing more was sent; {looked_for}."
    )
    fields: dict[str, Any] = {
        "idempotency_key": task.idempotency_key,
        "answered_at": now,
        "outcome": Attempt.Outcome.UNKNOWN,
        "error": error,
    }
    if sent is None:
        submitted_at = task.submitted_at or now
        Attempt.objects.create(task=task, number=number, submitted_at=submitted_at, **fields)
    else:
        update(sent, **fields)
    log.error("task=%s Ember named job %s, which %s already has", task.pk, job_id, whose)
    return move(task, TaskState.UNCERTAIN, phase=phrases.RECONCILE_PHASE, error=error)


def image_holder(task: Task, image_id: str) -> Asset | None:
    """Return another task's asset that already is Ember's image `image_id`, if any."""
    if not image_id or not _any(Asset, "ember_image_id", image_id, "task", task.pk):
        return None
    held = Asset.objects.filter(ember_image_id=image_id, task__isnull=False).exclude(task=task)
    return held.select_related("task").first()


def rest_image_held(task: Task, image_id: str, holder: Asset) -> Task:
    """Rest `task` uncertain: its job's result names an image `holder` already is."""
    other = holder.task
    assert other is not None
    error = (
        f"Ember's result for job {task.ember_job_id} names image {image_id}, which task "
        f"{other.pk} ({other.provider} {other.frame} #{other.ordinal}) already holds: it is "
        "not filed as this task's, and nothing was released. This task's own image may "
        f"still be protected in Ember: look job {task.ember_job_id} up there."
    )
    log.error("task=%s result names image %s, which task %s holds", task.pk, image_id, other.pk)
    return move(task, TaskState.UNCERTAIN, phase=phrases.RECONCILE_PHASE, error=error)
