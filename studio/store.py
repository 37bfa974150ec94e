"""Versioned writes: every row change bumps `version`; a writer may insist on the one it read.

A state change is one conditional UPDATE (`WHERE pk = … AND version = …`). Zero
rows means another writer moved the row first: a normal outcome that the caller
handles, never a silent overwrite. `select_for_update` does nothing on SQLite; a
compare-and-swap on `version` works on every database.
"""

import logging
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import F
from django.utils import timezone

from studio.models import ACTIVE, Task, TaskState, Versioned

log = logging.getLogger("studio.tasks")

V = TypeVar("V", bound=Versioned)


class Conflict(Exception):
    """The row moved since it was read: someone else's write won."""


def update(obj: V, *, expected: int | None = None, **fields: Any) -> V:
    """Write `fields` to `obj`'s row and bump its version; keep `obj` in step.

    With `expected`, the write happens only if the row's version is still
    `expected`; otherwise `Conflict` is raised and nothing is written. Without it
    the write always happens (it records something that must not be lost).
    """
    model = type(obj)
    if any(f.name == "updated_at" for f in model._meta.concrete_fields):
        fields.setdefault("updated_at", timezone.now())
    rows = model._default_manager.filter(pk=obj.pk)
    if expected is not None:
        if rows.filter(version=expected).update(version=expected + 1, **fields) == 0:
            raise Conflict(f"{model.__name__} {obj.pk} moved past version {expected}")
        obj.version = expected + 1
    # Usually nobody wrote since `obj` was read: one statement, and the new version is
    # known. If someone did, write anyway and read the version back.
    elif rows.filter(version=obj.version).update(version=obj.version + 1, **fields):
        obj.version += 1
    elif rows.update(version=F("version") + 1, **fields):
        obj.refresh_from_db(fields=["version"])
    else:
        raise model.DoesNotExist(f"{model.__name__} {obj.pk} no longer exists")
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def move(
    task: Task,
    state: TaskState,
    *,
    expected: int | None = None,
    due: datetime | None = None,
    **fields: Any,
) -> Task:
    """Move `task` to `state` (a versioned write) and log the change as one line.

    `next_attempt_at` is kept set exactly while the task is ACTIVE: `due` when
    given, else now. That invariant is what lets the pump's partial index cover
    only the active tasks.
    """
    before = task.state
    if state in ACTIVE:
        fields["next_attempt_at"] = due or timezone.now()
    else:
        fields["next_attempt_at"] = None
    update(task, expected=expected, state=state, **fields)
    if before != state:
        # One line per state change: who, from, to, and the sentence people see.
        log.info("task=%s from=%s to=%s phase=%r", task.pk, before, state, task.phase)
    return task
