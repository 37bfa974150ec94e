"""A done task's earlier jobs Ember accepted, asked about one by one (lost_sends.py).

A job that did not finish within the poll bound sent its task to `uncertain`; once a
person resubmitted it, nothing followed that job, which may have finished since with a
paid original (a kill review's). A reconcile of the done task asks Ember about each such
job: one that failed made nothing (its attempt says so), one that succeeded is named on
the task as a paid original left in Ember, one still under way is asked about again at
the next reconcile.
"""

from typing import Any

from asgiref.sync import sync_to_async

from studio.ember.client import EmberClient, EmberError, Job
from studio.engine.lost_sends import NAMED, unlooked
from studio.models import Attempt, Task
from studio.store import update

AT_ONCE = 20  # jobs asked about in one reconcile: a task has a few attempts, not more


async def look_up(task: Task, client: EmberClient) -> list[Job]:
    """Ask Ember about the task's earlier jobs nobody has looked for; return its answers.

    A job Ember could not say anything about (unknown to it, unreachable now) is left for
    the next reconcile.
    """
    jobs = await sync_to_async(_job_ids)(task)
    answers = []
    for job_id in jobs:
        try:
            answers.append(await client.poll(job_id))
        except EmberError:
            continue
    return answers


def _job_ids(task: Task) -> list[str]:
    return list(unlooked(task).values_list("ember_job_id", flat=True)[:AT_ONCE])


def settle(task: Task, jobs: list[Job]) -> list[dict[str, Any]]:
    """Record on their attempts the jobs that failed; return the succeeded ones as rows
    of Ember's history would carry them (job, image, answer), to be named on the task."""
    rows = []
    for job in jobs:
        if job.status == "failed":
            for attempt in task.attempts.filter(ember_job_id=job.id):
                said = f"Ember says the job failed: {job.error}"
                error = f"{attempt.error} {said}".strip()
                update(attempt, outcome=Attempt.Outcome.FAILED, error=error)
        elif job.status == "succeeded" and job.result is not None:
            rows.append({"job_id": job.id, "result": job.result})
    return rows


def mark_named(task: Task, job_ids: set[str]) -> None:
    """Say on each attempt of these jobs that its original is named on the task."""
    for attempt in task.attempts.filter(ember_job_id__in=job_ids).exclude(error__contains=NAMED):
        update(attempt, error=f"{attempt.error} {NAMED}".strip())


def named(task: Task) -> set[str]:
    """Return the jobs of the task whose originals a reconcile named already."""
    found = task.attempts.filter(error__contains=NAMED).values_list("ember_job_id", flat=True)
    return set(found)
