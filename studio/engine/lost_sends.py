"""A done task's sends whose answers were lost (docs/operations.md, "Resubmitting").

After a person resubmits an uncertain task and the new send is done, the send before it
may still have reached Ember and made a paid original, which Ember keeps protected and
Avatars never copies as this task's. Nothing looks for it by itself: the worker's history
search stops once the task leaves `uncertain`, and a reconcile of the task, which names
such originals on it, took only tasks that need a person (a review). A reconcile now
takes such a done task too: it reads Ember's history, records each job on the attempt
that sent it, and names any other paid original on the task, which stays `done`.
"""

from django.db.models import QuerySet

from studio.models import RECONCILABLE, Attempt, Task, TaskState
from studio.phrases import LEFT_IN_EMBER

NOTHING_YET = (
    "Ember's history shows nothing yet of its send whose answer was lost: it may not have "
    "reached Ember, or Ember has not written its row yet. Reconcile it again later."
)
NOTHING_ELSE = "Ember's history names every send of it: no other paid original is left there."


def lost_sends(task: Task) -> bool:
    """Say whether `task` is done with a send whose answer was lost and whose job no
    look-up has named since."""
    return (
        task.state == TaskState.DONE
        and task.attempts.filter(outcome=Attempt.Outcome.UNKNOWN, ember_job_id="").exists()
    )


def reconcilable(task: Task) -> bool:
    """Say whether a reconcile takes `task`: one that needs a person, or one done with a
    send whose answer was lost (the admin, the command, the API and the engine alike)."""
    return task.state in RECONCILABLE or lost_sends(task)


def done_with_lost_sends(tasks: QuerySet[Task]) -> QuerySet[Task]:
    """Return those of `tasks` that `lost_sends` would name."""
    return tasks.filter(
        state=TaskState.DONE,
        attempts__outcome=Attempt.Outcome.UNKNOWN,
        attempts__ember_job_id="",
    ).distinct()


def said(task: Task) -> str:
    """Say, for an operator, what a reconcile of a done task found in Ember's history."""
    start = task.error.find(LEFT_IN_EMBER)
    if start >= 0:
        return task.error[start:]
    return NOTHING_YET if lost_sends(task) else NOTHING_ELSE
