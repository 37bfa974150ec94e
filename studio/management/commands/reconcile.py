"""`manage.py reconcile`: ask Ember's history about tasks that need a person (docs/design.md §8).

It exits 1 when a named task is not reconcilable, Ember could not be asked about a task
(unreachable, or refusing us), or it handed back a copy whose image Ember had said it no
longer has (a paid original that may be lost), so a scheduled run can alert; a task left
where it is because Ember's history says so is not an error.
"""

import uuid
from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.ember.client import EmberAuthError, shown_id
from studio.engine.lost_sends import reconcilable
from studio.engine.lost_sends import said as lost_said
from studio.engine.recovery import copy_gone, history_unread, reconcile_outcome
from studio.management.ready import require_migrated
from studio.models import RECONCILABLE, Task, TaskState
from studio.phrases import GONE_REMEDY
from studio.store import Conflict
from studio.worker.troubles import ember_away

HANDED_BACK = "handed back to the worker"
GONE = "handed back, Ember had said it no longer has"  # counted apart, within HANDED_BACK
LEFT = "left as Ember's history says"
MOVED = "moved meanwhile"
UNASKED = "Ember could not be asked about"
AWAY_IN_A_ROW = 3  # questions Ember could not answer, one after another, before it is let be


def _tasks(count: int) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"


class Command(BaseCommand):
    help = "Reconcile uncertain, history_missing and copy_failed tasks with Ember's history."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task_ids", nargs="*", help="task ids to reconcile")
        parser.add_argument("--all", action="store_true", help="every reconcilable task")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        found = self._found(options["task_ids"], every=options["all"])
        refused = [task for task in found if not reconcilable(task)]
        for task in refused:
            self.stdout.write(
                f"{task.pk} {task.state}: not reconcilable (only uncertain, history_missing "
                "and copy_failed are, and done with an earlier send not looked for); left as it is"
            )
        counts = self._reconcile_each([task for task in found if task not in refused])
        gone = counts.pop(GONE, 0)
        if gone:
            counts[HANDED_BACK] += gone
        if counts:
            asked = sum(counts.values())
            parts = ", ".join(f"{counts[what]} {what}" for what in (HANDED_BACK, LEFT, MOVED))
            self.stdout.write(f"{_tasks(asked)}: {parts}, {counts[UNASKED]} {UNASKED}.")
        elif not found:  # --all, and nothing waits: said, so a run is not mistaken for none
            self.stdout.write(
                "No task needs reconciling (none is uncertain, history_missing or copy_failed)."
            )
        failures = []
        if refused:
            failures.append(f"{len(refused)} task(s) were not reconcilable.")
        if counts[UNASKED]:
            failures.append(
                f"{UNASKED} {_tasks(counts[UNASKED])}: run reconcile again when Ember answers."
            )
        if gone:
            # The worker will most likely fail it again at once: a paid original may be
            # lost, which a scheduled run must not keep quiet about (docs/operations.md).
            failures.append(
                f"{_tasks(gone)} handed back had last failed because Ember said it no "
                f"longer has its image: {GONE_REMEDY}"
            )
        if failures:
            raise CommandError(" ".join(failures), returncode=1)

    def _found(self, ids: list[str], *, every: bool) -> list[Task]:
        """Return the tasks named (each must exist) or, with --all, every reconcilable one."""
        if bool(ids) == bool(every):
            raise CommandError("Name task ids or pass --all (not both).")
        # Each id as written, by the task it names (in capitals or not, with or without -).
        named: dict[str, str] = {}
        for task_id in ids:
            try:
                named.setdefault(str(uuid.UUID(task_id)), task_id)
            except ValueError:
                # Cut, as an id is shown: a review's 100,000-character one came back whole.
                raise CommandError(f"Not a task id: {shown_id(task_id)}") from None
        if every:  # the oldest batch's first: a run cut short asks about those first
            return list(
                Task.objects.reconcilable().order_by(
                    "batch__created_at", "batch", "provider", "frame", "ordinal"
                )
            )
        found = {str(t.pk): t for t in Task.objects.filter(pk__in=named)}
        unknown = [written for pk, written in named.items() if pk not in found]
        if unknown:
            raise CommandError(f"Unknown task: {unknown[0]}")
        return [found[pk] for pk in named]  # in the order named

    def _reconcile_each(self, tasks: list[Task]) -> Counter[str]:
        """Reconcile each task; once Ember could not be asked AWAY_IN_A_ROW times running
        (or refused our credentials once), ask it about none of the rest.

        Each question to an Ember that hangs waits out its deadline: a review's `--all`
        took 30 s a task (15 minutes for 30), and runs from cron overlapped. One 5xx in
        between answers is not Ember away: a later review's flaky Ember (one in ten)
        stopped every run at its first one, and the later tasks were never reached.
        """
        counts: Counter[str] = Counter()
        self.away, self.refused = 0, False
        for done, task in enumerate(tasks, start=1):
            counts[self._reconcile(task)] += 1
            # Not for an answer about one task (an unsafe id in its history): a re-review
            # saw such a task, the oldest, stop every run before the others.
            if (self.refused or self.away >= AWAY_IN_A_ROW) and done < len(tasks):
                left = len(tasks) - done
                self.stdout.write(
                    f"Ember was not asked about the other {_tasks(left)}, left as they are."
                )
                counts[UNASKED] += left
                break
        return counts

    def _reconcile(self, task: Task) -> str:
        """Reconcile one task, print its line, and return which count it adds to."""
        before, gone = task.state, copy_gone(task)
        try:
            outcome = reconcile_outcome(task=task)
        except Conflict:
            # Someone moved the task while Ember was asked; their write stands.
            self.stdout.write(f"{task.pk} moved while reconciling; left as it is")
            return MOVED
        task = outcome.task
        self.away = 0 if outcome.unasked is None else self.away
        if outcome.unasked is not None:
            exc = outcome.unasked
            self.away = self.away + 1 if ember_away(exc) else 0
            self.refused = isinstance(exc, EmberAuthError)
            said = history_unread(exc).rstrip(".")  # not ".;" (a review)
            self.stdout.write(f"{task.pk} {before}: {said}; left as it is")
            return UNASKED
        if before == TaskState.DONE and task.state == TaskState.DONE:
            self.stdout.write(f"{task.pk} done: {lost_said(task)}")
            return LEFT
        self.stdout.write(f"{task.pk} {before} -> {task.state}: {task.phase}")
        if task.state == TaskState.COPYING:
            return GONE if gone else HANDED_BACK
        return LEFT if task.state in RECONCILABLE else MOVED
