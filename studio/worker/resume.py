"""A worker's start: the jobs a dead worker left with Ember go before what is not yet sent.

The pump takes due tasks oldest first (`Task.objects.due`), and a queued task is due from
its planning, before any job sent since. A review killed a worker with four jobs
`running` and 36 tasks queued: the restarted worker sent all 36 (36 new paid jobs) before
it polled the four Ember had finished 30 s earlier, whose rows said "Ember is generating"
all the while; killed again and again, it piled finished work up uncollected. So at
start, the `running` and `copying` tasks already due are put first.
"""

from datetime import datetime, timedelta

from django.db.models import F, Min

from studio.models import Task, TaskState

PAID = (TaskState.RUNNING, TaskState.COPYING)  # a job Ember took, to follow or to copy
AHEAD = timedelta(microseconds=1)


def paid_first(now: datetime) -> int:
    """Make the due `running` and `copying` tasks due just before every other; return how
    many. A job whose next poll is still to come keeps its time."""
    earliest = Task.objects.due(now).aggregate(first=Min("next_attempt_at"))["first"]
    if earliest is None:
        return 0
    due = Task.objects.due(now).filter(state__in=PAID)
    return due.update(next_attempt_at=earliest - AHEAD, version=F("version") + 1)
