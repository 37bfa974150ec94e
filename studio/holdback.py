"""Holding back, in a restored snapshot, the tasks the lost install may have sent after it.

Plain SQL on the snapshot's own tables, so it runs before `migrate`. Each such task gets
an `unknown` attempt (the number its send would have had), which is what the worker's
history search looks for, stamped with the restore's time: the lost install may have
sent it at any time up to its loss, so a resubmit within the poll bound needs a person's
word that Ember never had it, and its first history search comes once such a job has had
time to finish.

- An image waiting to be sent rests `uncertain`: an image has no key to make a second
  send free.
- A clip waiting to be sent stays queued, as a re-send under its key is free; its
  attempt under that key keeps it from being cancelled (a cancelled task is never
  reconciled, so its original would stay in Ember).
- A task that had failed with nothing sent rests `uncertain` too: a person may have
  queued it again after the backup (the admin's "queue again"), and the lost install
  sent it, paid; queued again here it would be paid twice. A clip among them says
  "Reconcile before retry": the worker's history search takes images only.
"""

from datetime import UTC, datetime
from typing import Any

from studio.models import Attempt, Kind, Task, TaskState
from studio.phrases import MAY_HAVE_REACHED, RECONCILE_PHASE

HELD_PHASE = "Restored from a backup: looking for it in Ember's history"
HELD_ERROR = (
    "This task was waiting to be sent when the backup this install was restored from was "
    f"taken; the install that was lost may have sent it since. {MAY_HAVE_REACHED}"
)
HELD_FAILED_ERROR = (
    "This task had failed with nothing sent when the backup this install was restored from "
    "was taken; the install that was lost may have queued it again and sent it since. "
    f"{MAY_HAVE_REACHED}"
)
HELD_CLIP_NOTE = (
    "This clip was waiting to be sent when the backup this install was restored from was "
    "taken; the install that was lost may have sent it since. It is sent again under the "
    "same key, which Ember answers with that job if it has it, at no charge."
)
UNSENT = (TaskState.QUEUED, TaskState.PREPARING)


def hold_back(cursor: Any, *, marker: str) -> int:
    """Hold back what the lost install may have sent since the snapshot; return how many now
    rest `uncertain`. `marker` is the database's parameter placeholder."""
    attempt = Attempt._meta.db_table
    when = connection_time(datetime.now(UTC), marker)
    m = marker
    held = 0
    # First the failed ones, while "no attempt" still tells them apart.
    never_sent = (
        f"t.state = {m} AND t.ember_job_id = '' AND NOT EXISTS "
        f"(SELECT 1 FROM {attempt} a WHERE a.task_id = t.id)"
    )
    failed = [TaskState.FAILED.value]
    _add_unknown_attempts(cursor, never_sent, failed, when, HELD_FAILED_ERROR, marker=m)
    noted = f"id IN (SELECT task_id FROM {attempt} WHERE error = {m})"
    held += _rest_uncertain(
        cursor, f"state = {m} AND {noted}", [*failed, HELD_FAILED_ERROR], HELD_FAILED_ERROR, when, m
    )
    unsent = [state.value for state in UNSENT]
    # A clip's attempt is under its key, and only for one that has none under it yet.
    clips = (
        f"t.kind = {m} AND t.state IN ({m}, {m}) AND t.idempotency_key <> '' AND NOT EXISTS "
        f"(SELECT 1 FROM {attempt} k "
        f"WHERE k.task_id = t.id AND k.idempotency_key = t.idempotency_key)"
    )
    clip_args = [Kind.CLIP.value, *unsent]
    _add_unknown_attempts(
        cursor, clips, clip_args, when, HELD_CLIP_NOTE, marker=m, key="t.idempotency_key"
    )
    images = [Kind.IMAGE.value, *unsent]
    _add_unknown_attempts(
        cursor, f"t.kind = {m} AND t.state IN ({m}, {m})", images, when, HELD_ERROR, marker=m
    )
    held += _rest_uncertain(
        cursor, f"kind = {m} AND state IN ({m}, {m})", images, HELD_ERROR, when, m
    )
    return held


def _rest_uncertain(
    cursor: Any, where: str, args: list[Any], error: str, when: object, marker: str
) -> int:
    """Move the tasks `where` selects to `uncertain`, saying why; return how many.

    A clip is not searched for by the worker (docs/design.md §8.1): it waits for a person's
    reconcile, and says so, where an image says it is being looked for.
    """
    m = marker
    cursor.execute(
        f"UPDATE {Task._meta.db_table} SET state = {m}, "
        f"phase = CASE WHEN kind = {m} THEN {m} ELSE {m} END, "
        f"error = {m}, next_attempt_at = NULL, submitted_at = {m}, "
        f"version = version + 1 WHERE {where}",
        [
            TaskState.UNCERTAIN.value,
            Kind.CLIP.value,
            RECONCILE_PHASE,
            HELD_PHASE,
            error,
            when,
            *args,
        ],
    )
    return int(cursor.rowcount)


def _add_unknown_attempts(
    cursor: Any,
    where: str,
    args: list[Any],
    when: object,
    error: str,
    *,
    marker: str,
    key: str = "''",
) -> None:
    """Record an `unknown` attempt, sent at `when`, for each task `t` that `where` selects.

    Each takes the number its send would have had; `key` is what it was sent under.
    """
    task, attempt = Task._meta.db_table, Attempt._meta.db_table
    cursor.execute(
        f"INSERT INTO {attempt} (version, task_id, number, idempotency_key, ember_job_id, "
        f"submitted_at, answered_at, outcome, error) "
        f"SELECT 1, t.id, COALESCE((SELECT MAX(a.number) FROM {attempt} a "
        f"WHERE a.task_id = t.id), 0) + 1, {key}, '', {marker}, NULL, {marker}, {marker} "
        f"FROM {task} t WHERE {where}",
        [when, Attempt.Outcome.UNKNOWN.value, error, *args],
    )


def connection_time(when: datetime, marker: str) -> object:
    """Return `when` as the database stores it: SQLite text in UTC, else the datetime."""
    if marker == "?":
        return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return when
