"""`manage.py reconcile`: ask Ember's history about tasks that need a person (docs/design.md §8)."""

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.engine import reconcile
from studio.management.ready import require_migrated
from studio.models import RECONCILABLE, Task
from studio.store import Conflict


class Command(BaseCommand):
    help = "Reconcile uncertain, history_missing and copy_failed tasks with Ember's history."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task_ids", nargs="*", help="task ids to reconcile")
        parser.add_argument("--all", action="store_true", help="every reconcilable task")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        ids = options["task_ids"]
        if bool(ids) == bool(options["all"]):
            raise CommandError("Name task ids or pass --all (not both).")
        for task_id in ids:
            try:
                uuid.UUID(task_id)
            except ValueError:
                raise CommandError(f"Not a task id: {task_id}") from None
        tasks = Task.objects.reconcilable() if options["all"] else Task.objects.filter(pk__in=ids)
        found = list(tasks)
        if not options["all"] and len(found) != len(set(ids)):
            known = {str(t.pk) for t in found}
            raise CommandError(f"Unknown task: {next(i for i in ids if i not in known)}")
        refused = [task for task in found if task.state not in RECONCILABLE]
        for task in refused:
            self.stdout.write(
                f"{task.pk} {task.state}: not reconcilable (only uncertain, history_missing "
                "and copy_failed are); left as it is"
            )
        for task in found:
            if task in refused:
                continue
            before = task.state
            try:
                task = reconcile(task=task)
            except Conflict:
                # Someone moved the task while Ember was asked; their write stands.
                self.stdout.write(f"{task.pk} moved while reconciling; left as it is")
                continue
            self.stdout.write(f"{task.pk} {before} -> {task.state}: {task.phase}")
        if refused:
            raise CommandError(f"{len(refused)} task(s) were not reconcilable.", returncode=1)
