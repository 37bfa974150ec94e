"""Queue again a failed task nothing was paid for: a person's choice after a repair.

The worker fails a task without sending anything when a frozen reference no longer
matches its checksum, and Ember refuses some requests outright (a refusal makes no
job). Neither made a paid job, so once a person has repaired the cause (`check_originals
--repair` for a reference), the task can go back to `queued` and its next send is its
first paid job. A task Ember took a job for (an Attempt) is never queued again here:
that would be the second payment for one intent.
"""

import uuid

from studio import originals
from studio.engine.errors import (
    REQUEUE_NOT_FAILED,
    REQUEUE_REFERENCE_BAD,
    REQUEUE_WAS_SENT,
    RequeueRefused,
)
from studio.models import Kind, Task, TaskState
from studio.store import move

REQUEUED_PHASE = "Queued again by a person (nothing had been paid for it)"


def requeue(*, task: Task) -> Task:
    """Move a failed task with no attempt back to `queued`, once its references check out.

    Versioned: of two people (or two clicks) only one moves it; the other is told it
    is no longer failed. The worker reads and re-hashes the references again before it
    sends, as for any queued task; the check here only says early what it would find.
    """
    task.refresh_from_db()
    if task.state != TaskState.FAILED:
        # Say what it is now: a second person, told only the rule, did not see that the
        # first had queued it already (a review).
        raise RequeueRefused(f'{REQUEUE_NOT_FAILED} It is {task.state} now: "{task.phase}".')
    if was_sent(task):
        raise RequeueRefused(REQUEUE_WAS_SENT)
    if not all(_intact(ref["sha256"], ref["mime"]) for ref in task.references):
        raise RequeueRefused(REQUEUE_REFERENCE_BAD)
    return move(
        task,
        TaskState.QUEUED,
        expected=task.version,
        phase=REQUEUED_PHASE,
        error="",
        # A clip's old key may carry Ember's refusal; no job was made under it.
        idempotency_key=uuid.uuid4().hex if task.kind == Kind.CLIP else "",
    )


def was_sent(task: Task) -> bool:
    """Say whether Ember may have made a job for `task`: an attempt, or a job id, on record."""
    return bool(task.ember_job_id) or task.attempts.exists()


def _intact(sha256: str, mime: str) -> bool:
    """Say whether the original of a frozen reference is on disk with its checksum."""
    try:
        originals.read(sha256, mime)
    except (OSError, ValueError, originals.ChecksumFailed):
        return False
    return True
