"""A done task's earlier sends whose paid originals nobody has looked for (docs/operations.md,
"Resubmitting").

After a person resubmits an uncertain task and the new send is done, the send before it
may still have made a paid original, which Ember keeps protected and Avatars never copies
as this task's: a send whose answer was lost (it may have reached Ember after all), or a
job Ember accepted that did not finish within the poll bound and finished after the
resubmit (a kill review's). Nothing looks for them by itself: the worker stops following
a task once it leaves `uncertain`. A reconcile takes such a done task too: it reads
Ember's history (a lost answer's job) and asks Ember about each job it knows of, records
each on the attempt that sent it, and names any other paid original on the task, which
stays `done`.
"""

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from studio.models import RECONCILABLE, Attempt, Task, TaskState
from studio.phrases import LEFT_IN_EMBER

NOTHING_YET = (
    "Ember's history shows nothing yet of its send whose answer was lost: it may not have "
    "reached Ember, or Ember has not written its row yet. Reconcile it again later."
)
NOTHING_ELSE = "Ember's history names every send of it: no other paid original is left there."
STILL_RUNNING = "Ember has not said that {jobs} of this task finished: reconcile it again later."
# On an attempt whose job's original a reconcile named on its task: looked for, found.
NAMED = "Its paid original is named on the task, left in Ember."


def lost_sends(task: Task) -> bool:
    """Say whether `task` is done with an earlier send nobody has looked for: one whose
    answer was lost, or a job Ember accepted whose original is neither copied nor named."""
    if task.state != TaskState.DONE:
        return False
    return _answer_lost(task.attempts.all()).exists() or unlooked(task).exists()


def _answer_lost(attempts: QuerySet[Attempt]) -> QuerySet[Attempt]:
    """Return those of `attempts` whose answer was lost and whose job no look-up named."""
    return attempts.filter(outcome=Attempt.Outcome.UNKNOWN, ember_job_id="")


def unlooked(task: Task) -> QuerySet[Attempt]:
    """Return the attempts of `task` whose job Ember accepted, not the task's own job, whose
    original no reconcile has named yet (nor found failed).

    A task that does not know its own job (a re-review made one) takes its latest send's
    for its own, as a reconcile does: it is never said to be an earlier one.
    """
    attempts = _accepted_unnamed(task.attempts.all())
    if task.ember_job_id:
        return attempts.exclude(ember_job_id=task.ember_job_id)
    return attempts.exclude(number__in=task.attempts.sends().values("number")[:1])


def _accepted_unnamed(attempts: QuerySet[Attempt]) -> QuerySet[Attempt]:
    accepted = attempts.filter(outcome=Attempt.Outcome.ACCEPTED).exclude(ember_job_id="")
    return accepted.exclude(error__contains=NAMED)


def reconcilable(task: Task) -> bool:
    """Say whether a reconcile takes `task`: one that needs a person, or one done with an
    earlier send nobody has looked for (the admin, the command, the API and the engine)."""
    return task.state in RECONCILABLE or lost_sends(task)


def done_with_lost_sends(tasks: QuerySet[Task]) -> QuerySet[Task]:
    """Return those of `tasks` that `lost_sends` would name."""
    lost = _answer_lost(Attempt.objects.filter(task=OuterRef("pk")))
    theirs = _accepted_unnamed(Attempt.objects.filter(task=OuterRef("pk")))
    left = theirs.exclude(ember_job_id=OuterRef("ember_job_id"))
    latest = Attempt.objects.filter(task=OuterRef("task")).sends().values("number")[:1]
    left_unknown_own = theirs.exclude(number=Subquery(latest))
    return tasks.filter(state=TaskState.DONE).filter(
        Exists(lost)
        | (~Q(ember_job_id="") & Exists(left))
        | (Q(ember_job_id="") & Exists(left_unknown_own))
    )


def said(task: Task) -> str:
    """Say, for an operator, what a reconcile of a done task found."""
    start = task.error.find(LEFT_IN_EMBER)
    parts = [task.error[start:] if start >= 0 else ""]
    running = list(unlooked(task).values_list("ember_job_id", flat=True))
    if running:
        jobs = ", ".join(f"job {job}" for job in running)
        parts.append(STILL_RUNNING.format(jobs=jobs))
    if _answer_lost(task.attempts.all()).exists():
        parts.append(NOTHING_YET)
    return " ".join(filter(None, parts)) or NOTHING_ELSE
