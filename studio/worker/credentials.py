"""Ember refusing our credentials (401/403): the token is wrong now, no task's fault.

A submit refused so is queued again (`transitions._not_accepted`). A poll or a copy
refused so stays where it is, due again later (`wait`): a copy went `copy_failed` for a
person to reconcile, every copy in flight (a review set a wrong EMBER_TOKEN), and a poll
counted towards the poll bound and sent a finished job `uncertain` (a re-review). The
token is read when a worker starts, so a worker started anew makes every task waiting on
it due at once (`wake`): the review's, started with the right one, waited 5 minutes.
"""

from datetime import datetime, timedelta

from django.db.models import Case, F, Value, When
from django.utils import timezone

from studio.ember.errors import EmberAuthError
from studio.models import Task, TaskState
from studio.phrases import AUTH_PHASE, COPYING_PHASE, GENERATING_PHASE, QUEUED_PHASE
from studio.store import move

AUTH_BACKOFF = 300.0  # seconds; wrong credentials will not fix themselves quickly


# What waits, by the state a refused request leaves a task in.
WAITING = {
    TaskState.RUNNING: "the job is asked about again then",
    TaskState.COPYING: "the copy waits for it",
}


def wait(task: Task, exc: EmberAuthError) -> Task:
    """Leave a task whose poll or copy Ember refused our credentials for where it is, due
    after AUTH_BACKOFF. A poll so refused does not count towards the poll bound: a
    re-review's wrong token sent a job Ember had finished `uncertain` for a person."""
    return move(
        task,
        TaskState(task.state),
        due=timezone.now() + timedelta(seconds=AUTH_BACKOFF),
        phase=f"{AUTH_PHASE}; {WAITING[TaskState(task.state)]}",
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
    return how many. One look, and one write only when some wait."""
    waiting = Task.objects.filter(phase__startswith=AUTH_PHASE, state__in=AWAKE)
    if not waiting.exists():
        return 0
    said = Case(*(When(state=state, then=Value(phase)) for state, phase in AWAKE.items()))
    return waiting.update(next_attempt_at=now, phase=said, version=F("version") + 1)
