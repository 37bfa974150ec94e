"""Versioned writes: every row change bumps `version`; a writer may insist on the one it read.

A state change is one conditional UPDATE (`WHERE pk = … AND version = …`). Zero
rows means another writer moved the row first: a normal outcome that the caller
handles, never a silent overwrite. `select_for_update` does nothing on SQLite; a
compare-and-swap on `version` works on every database.
"""

import functools
import logging
from datetime import datetime
from typing import Any, TypeVar

from django.core.exceptions import FieldDoesNotExist
from django.db import connections, router, transaction
from django.db.models import CharField, F, Field, Model
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
    if _stamped(model):
        fields.setdefault("updated_at", timezone.now())
    if expected is not None:
        if _swap(obj, expected, fields) == 0:
            raise Conflict(f"{model.__name__} {obj.pk} moved past version {expected}")
        obj.version = expected + 1
    # Usually nobody wrote since `obj` was read: one statement, and the new version is
    # known. If someone did, write anyway and read the version back.
    elif _swap(obj, obj.version, fields):
        obj.version += 1
    elif model._default_manager.filter(pk=obj.pk).update(version=F("version") + 1, **fields):
        obj.refresh_from_db(fields=["version"])
    else:
        raise model.DoesNotExist(f"{model.__name__} {obj.pk} no longer exists")
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def _swap(obj: Versioned, version: int, fields: dict[str, Any]) -> int:
    """Write `fields` and `version + 1` where the row is still at `version`; return rows written.

    One `UPDATE … WHERE pk = %s AND version = %s`, put together here from the fields'
    own conversions (what Django's compiler would send, without compiling a query:
    most of what a state change costs the worker's database thread). A value the
    ORM must compile (an expression) goes through `QuerySet.update` instead.
    """
    model = type(obj)
    using = router.db_for_write(model, instance=obj)
    connection = connections[using]
    statement = _statement(model, version, fields, connection)
    if statement is None:
        rows = model._default_manager.filter(pk=obj.pk, version=version)
        return rows.update(version=version + 1, **fields)
    sql, params = statement
    params += [model._meta.pk.get_db_prep_value(obj.pk, connection), version]
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _statement(
    model: type[Model], version: int, fields: dict[str, Any], connection: Any
) -> tuple[str, list[Any]] | None:
    """Return the versioned UPDATE for `fields` (pk and version still to bind), or None."""
    quote = connection.ops.quote_name
    assignments, params = [], []
    for name, value in fields.items():
        field = _column(model, name)
        if field is None:
            return None  # the ORM says what is wrong with the name, or writes the column
        if hasattr(value, "resolve_expression"):
            return None
        if hasattr(value, "prepare_database_save"):  # a model instance
            if field.remote_field is None:
                return None  # the ORM says why it does not belong there
            value = value.prepare_database_save(field)
        value = field.get_db_prep_save(value, connection=connection)
        if hasattr(value, "as_sql"):
            return None
        if value is None:
            assignments.append(f"{quote(field.column)} = NULL")
        else:
            assignments.append(f"{quote(field.column)} = %s")
            params.append(value)
    assignments.append(f"{quote('version')} = %s")
    params.append(version + 1)
    meta = model._meta
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {quote(meta.pk.column)} = %s AND {quote('version')} = %s"
    )
    return sql, params


@functools.cache
def _stamped(model: type[Model]) -> bool:
    """Say whether `model` has an `updated_at` column (every write sets it)."""
    return any(f.name == "updated_at" for f in model._meta.concrete_fields)


@functools.cache
def _column(model: type[Model], name: str) -> Field | None:
    """Return the field `name` of `model` if `_statement` may write it plainly, else None.

    None for a name that is not a field (the ORM then says what is wrong with it), a
    field that is not a column of this table, or one whose placeholder the compiler
    must write. Looked up once per model and name: a state change's fields are few.
    """
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    if not isinstance(field, Field) or not field.concrete or field.many_to_many:
        return None
    if hasattr(field, "get_placeholder"):
        return None
    return field


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
        # One line per state change: who, from, to, and the sentence people see. Once it
        # is committed: a change rolled back (a full disk) was logged as if made (a review).
        said = ("task=%s from=%s to=%s phase=%r", task.pk, before, state, task.phase)
        transaction.on_commit(lambda: log.info(*said))
    return task


def fitted(model: type[Model], column: str, value: object) -> str:
    """Return `value` as text cut to what `model`'s `column` holds.

    For words another service chooses: Ember's 200-character model name once kept a paid
    original's row from being written (PostgreSQL refuses what SQLite stores).
    """
    field = model._meta.get_field(column)
    assert isinstance(field, CharField)
    return str(value)[: field.max_length]
