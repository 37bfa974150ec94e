"""Cancelling tasks and batches while nothing of them may be with Ember (docs/design.md §9)."""

from dataclasses import dataclass, field

from studio.engine.errors import ALREADY_ENDED, RESUBMIT_WITHDRAWN, TOO_LATE, TooLate
from studio.models import FINAL, Batch, Task, TaskState
from studio.store import Conflict, move


@dataclass
class BatchCancel:
    """What a batch's cancel did: the tasks it cancelled, those it kept going with Ember,
    and those that had ended before it (done, failed or cancelled already)."""

    cancelled: list[Task] = field(default_factory=list)
    kept: list[Task] = field(default_factory=list)
    ended: list[Task] = field(default_factory=list)

    def sentence(self) -> str:
        """Say what the cancel did, as the studio shows it ("Cancelled 2 tasks; kept 1 ...")."""
        count = len(self.cancelled)
        parts = [f"Cancelled {count} task{'' if count == 1 else 's'}"]
        if self.kept:
            parts.append(f"kept {len(self.kept)} already with Ember")
        # One cancelled just before was said to have "ended" (a review): said as it is.
        before = sum(1 for task in self.ended if task.state == TaskState.CANCELLED)
        if before:
            parts.append(f"{before} {'was' if before == 1 else 'were'} already cancelled")
        if len(self.ended) > before:
            parts.append(f"{len(self.ended) - before} had already ended")
        return "; ".join(parts) + "."


def cancel_task(*, task: Task) -> Task:
    """Cancel a task that has sent nothing to Ember (under its current key), or raise TooLate.

    A resubmitted task that is not sent yet is not cancelled but put back to `uncertain`
    (its earlier attempt may be a paid original in Ember that reconciling collects).

    The write is versioned: if the worker moves the task at the same moment,
    exactly one side wins, and a lost race is re-read and judged again.
    """
    while True:
        if task.state == TaskState.CANCELLED:
            return task
        if task.state == TaskState.FAILED:
            raise TooLate(ALREADY_ENDED)
        # A clip sent under its current key may be with Ember (its answer was lost): it
        # goes on under that key. Every such send is recorded together with a version
        # bump, so the versioned write below cannot miss one that lands meanwhile.
        if not task.cancellable():
            raise TooLate(TOO_LATE)
        try:
            if task.attempts.exists():
                # A resubmitted task: an earlier attempt may be a paid original in Ember,
                # which only reconciling can collect. A cancelled task is never looked at
                # again, so cancelling withdraws the resubmit and nothing more.
                return move(
                    task,
                    TaskState.UNCERTAIN,
                    expected=task.version,
                    phase="Resubmit withdrawn; reconcile before retry",
                    error=RESUBMIT_WITHDRAWN,
                )
            return move(
                task,
                TaskState.CANCELLED,
                expected=task.version,
                phase="Cancelled",
                error="Cancelled before anything was sent to Ember.",
            )
        except Conflict:
            task.refresh_from_db()


def cancel_batch(*, batch: Batch) -> BatchCancel:
    """Cancel what can be cancelled in `batch` and report what was kept."""
    report = BatchCancel()
    for task in batch.tasks.order_by("created_at", "ordinal"):
        if task.state in (TaskState.CANCELLED, TaskState.FAILED):
            report.ended.append(task)  # nothing to cancel, and no work with Ember to keep
            continue
        try:
            done = cancel_task(task=task)
        except TooLate:
            # As cancel_task last read it (a lost race re-reads the task in place).
            (report.ended if task.state in FINAL else report.kept).append(task)
        else:
            # A withdrawn resubmit keeps its earlier attempt, which may be with Ember.
            (report.cancelled if done.state == TaskState.CANCELLED else report.kept).append(done)
    return report
