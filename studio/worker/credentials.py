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
from studio.models import ACTIVE, Task, TaskState
from studio.phrases import AUTH_PHASE
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


def wake(now: datetime) -> int:
    """Make the active tasks that wait on Ember's refusal of our credentials due now;
    return how many."""
    waiting = Task.objects.filter(
        state__in=ACTIVE, phase__startswith=AUTH_PHASE, next_attempt_at__gt=now
    )
    return waiting.update(next_attempt_at=now, version=F("version") + 1)
