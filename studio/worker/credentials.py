"""Ember refusing our credentials (401/403): the token is wrong now, no task's fault.

A submit refused so is queued again (`transitions._not_accepted`). A copy refused so
stays `copying`, due again later (`wait`): it went `copy_failed` for a person to
reconcile, every copy in flight (a review set a wrong EMBER_TOKEN). The token is read
when a worker starts, so a worker started anew makes every task waiting on it due at
once (`wake`): the review's, started with the right one, waited out the 5 minutes.
"""

from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from studio.ember.errors import EmberAuthError
from studio.models import Task, TaskState
from studio.phrases import AUTH_PHASE, COPYING_PHASE, GENERATING_PHASE, QUEUED_PHASE
from studio.store import move

AUTH_BACKOFF = 300.0  # seconds; wrong credentials will not fix themselves quickly


def wait(task: Task, exc: EmberAuthError) -> Task:
    """Leave a copy Ember refused our credentials for `copying`, due after AUTH_BACKOFF."""
    return move(
        task,
        TaskState.COPYING,
        due=timezone.now() + timedelta(seconds=AUTH_BACKOFF),
        phase=f"{AUTH_PHASE}; the copy waits for it",
        error=exc.message,
    )


# What a task woken from its wait says again, by state.
AWAKE = {
    TaskState.QUEUED: QUEUED_PHASE,
    TaskState.RUNNING: GENERATING_PHASE,
    TaskState.COPYING: COPYING_PHASE,
}


def wake(now: datetime) -> int:
    """Make the active tasks that wait on Ember's refusal of our credentials due now, their
    phase no longer naming EMBER_TOKEN (a re-review's said it until their turn came);
    return how many."""
    waiting = Task.objects.filter(phase__startswith=AUTH_PHASE)
    return sum(
        waiting.filter(state=state).update(
            next_attempt_at=now, phase=phase, version=F("version") + 1
        )
        for state, phase in AWAKE.items()
    )
