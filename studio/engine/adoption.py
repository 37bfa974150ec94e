"""Adoption without a person (docs/design.md §8.1): the worker looks up lost image submits.

An `uncertain` image whose latest submit's answer was lost may be a paid job in Ember.
The worker searches Ember's history for it (free) at a bounded rate: each task at most
once per `AVATARS_ADOPT_EVERY` seconds, and at most `AVATARS_ADOPT_PER_MINUTE` searches a
minute in all, both counted from the database so that a restart does not search again.
The one row naming the task and that attempt is adopted through reconcile's own
adoption; anything else stays `uncertain` for a person, with what was found on the task.
A search never submits, copies or releases: an adopted task goes to `copying`, and the
worker's copy step takes it from there.
"""

import logging
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from studio.ember.client import EmberClient, EmberError
from studio.engine.history_rows import (
    carries,
    held_note,
    is_usable,
    not_held,
    row_image,
    strays_note,
)
from studio.engine.recovery import _one_each, _record_history, _refused_note, latest_send
from studio.models import POLL_BOUND, Attempt, HistorySearch, Kind, Task, TaskState
from studio.phrases import NO_ROW_LATE_PHASE, NO_ROW_PHASE
from studio.store import Conflict, update

log = logging.getLogger("studio.worker")

# The span AVATARS_ADOPT_PER_MINUTE counts searches over: the tasks whose last search began
# in it (exact, since the settings allow each task at most one search a minute).
WINDOW = timedelta(seconds=60)
LISTED = 5  # originals a search names on the task; the rest are counted
AMBIGUOUS_PHASE = "Ember's history holds rows Avatars will not take on its own; a person decides"


async def adopt_due(*, client: EmberClient, now: datetime | None = None) -> list[Task]:
    """Search Ember's history for the lost submits due a search, up to the cap; return them.

    Each task comes back as its search left it: `copying` when its row was adopted.
    """
    now = now or timezone.now()
    due = await sync_to_async(claim_due)(now)
    return [await _search(task, number, client, now) for task, number in due]


def claim_due(now: datetime) -> list[tuple[Task, int]]:
    """Note a search at `now` for each task due one, within the cap; return (task, lost attempt).

    The note is written before Ember is asked, so a search that dies midway still
    counts: a worker that keeps dying cannot turn into a storm of searches.
    """
    recent = HistorySearch.objects.filter(searched_at__gt=now - WINDOW).count()
    room = settings.AVATARS_ADOPT_PER_MINUTE - recent
    if room <= 0:
        return []
    due = list(_due_query(now)[:room])
    tasks = Task.objects.in_bulk([pk for pk, _number in due])
    for pk, _number in due:
        noted = HistorySearch.objects.filter(task_id=pk).first()
        if noted is None:
            HistorySearch.objects.create(task_id=pk, searched_at=now, searches=1)
        else:
            update(noted, searched_at=now, searches=noted.searches + 1)
    return [(tasks[pk], number) for pk, number in due]


def _due_query(now: datetime) -> "QuerySet[Task, tuple[Any, int]]":
    """Return (task id, lost attempt) of the uncertain images due a search, longest unlooked first.

    Due: a lost submit (`lost_submits`), first `AVATARS_ADOPT_EVERY` after that submit
    (Ember writes a history row only once the job finished), then that long after each
    search since.
    """
    cutoff = now - timedelta(seconds=settings.AVATARS_ADOPT_EVERY)
    due = lost_submits().filter(looked_at__lte=cutoff)
    return due.order_by("looked_at", "pk").values_list("pk", "lost_attempt")


def lost_submits() -> Any:  # a QuerySet of Task, annotated (the stubs cannot see)
    """Return the images resting `uncertain` on the lost answer of their latest submit, each
    with `lost_attempt` and `looked_at` (the last search of it, or the submit itself): the
    ones the worker searches Ember's history for, now or later."""
    # A failed resubmit is not the send in question: the one before it is (recovery.py).
    latest = Attempt.objects.filter(task=OuterRef("pk")).sends()
    lost = (
        Task.objects.filter(
            state=TaskState.UNCERTAIN, kind=Kind.IMAGE, ember_job_id="", asset__isnull=True
        )
        .annotate(
            lost_attempt=Subquery(latest.values("number")[:1]),
            lost_outcome=Subquery(latest.values("outcome")[:1]),
            lost_job=Subquery(latest.values("ember_job_id")[:1]),
            lost_sent=Subquery(latest.values("submitted_at")[:1]),
        )
        .annotate(
            # A search before the lost submit (of an earlier one, a person resubmitted since)
            # says nothing about it: its job may still be running.
            looked_at=Greatest(Coalesce("history_search__searched_at", "lost_sent"), "lost_sent"),
        )
    )
    return lost.filter(lost_outcome=Attempt.Outcome.UNKNOWN, lost_job="")


async def _search(task: Task, number: int, client: EmberClient, now: datetime) -> Task:
    """Read the task's history rows and record what they say about attempt `number`."""
    try:
        rows = await client.history(str(task.pk))
    except EmberError as exc:
        # Nothing learned: the task stays as it is and is looked up again next time.
        log.warning("task=%s history search failed: %s", task.pk, exc.message)
        return task
    return await sync_to_async(_record_search)(str(task.pk), number, rows, now)


def _record_search(task_id: str, number: int, rows: list[dict[str, Any]], now: datetime) -> Task:
    """Adopt the one original of the task, if it names attempt `number`; else leave it for a person.

    Rows are read as reconcile reads them: only those carrying the task's id are its
    originals (another task's is said so, never counted), and a row listed twice is one.
    """
    task = Task.objects.get(pk=task_id)
    if not _still_lost(task, number):
        return task  # a person reconciled or resubmitted it meanwhile: theirs stands
    found = _sort_out(rows, task, number)
    try:
        if len(found.originals) == 1 and len(found.mine) == 1 and found.all_usable:
            adopted = _record_history(task, rows)
            log.info("task=%s adopted job=%s from Ember's history", task.pk, adopted.ember_job_id)
            return adopted
        return _leave_for_a_person(task, number, found, now)
    except Conflict:
        return Task.objects.get(pk=task_id)  # another writer moved it first


def _still_lost(task: Task, number: int) -> bool:
    """Say whether `task` still rests `uncertain` on the lost answer of attempt `number`."""
    if task.state != TaskState.UNCERTAIN or task.ember_job_id or task.asset_id is not None:
        return False
    latest = latest_send(task)
    return latest is not None and latest.number == number and not latest.ember_job_id


def _names(row: dict[str, Any], task: Task, number: int) -> bool:
    """Say whether a history row's source metadata names this task and attempt `number`."""
    meta = row.get("source_metadata")
    if not isinstance(meta, dict):
        return False
    attempt = meta.get("attempt")
    return (
        meta.get("source_app") == "cwkAvatars"
        and meta.get("task_id") == str(task.pk)
        and type(attempt) is int
        and attempt == number
    )


class Found(NamedTuple):
    """A search's rows, sorted out as reconcile sorts them."""

    strays: int  # rows not carrying the task's id (another task's, another app's)
    held: list[dict[str, Any]]  # rows carrying it, naming a job or an image another task holds
    carried: list[dict[str, Any]]  # rows carrying it
    all_usable: bool  # whether every carried row is one reconcile would take
    originals: list[dict[str, Any]]  # the usable carried rows, one per image
    mine: list[dict[str, Any]]  # those of them naming the lost attempt


def _sort_out(rows: list[dict[str, Any]], task: Task, number: int) -> Found:
    """Sort out Ember's answer about `task`, whose attempt `number`'s answer was lost."""
    every = [row for row in rows if carries(row, task)]
    carried = not_held(task, every)  # a job or an image another task holds is not its own
    usable = [row for row in carried if is_usable(row)]
    originals = _one_each(usable)
    mine = [row for row in originals if _names(row, task, number)]
    held = [row for row in every if row not in carried]
    return Found(
        len(rows) - len(every), held, carried, len(usable) == len(carried), originals, mine
    )


def _leave_for_a_person(task: Task, number: int, found: Found, now: datetime) -> Task:
    """Show on the task what the search found; write only when that changed.

    No row carrying the task's id is no row yet: the worker looks again. Once any job sent
    then would have finished (the poll bound), the phase says a person decides: a review
    saw submits that never reached Ember wait for ever under "the worker looks again".
    """
    strays = " ".join(filter(None, [held_note(found.held), strays_note(found.strays)]))
    if not found.carried:
        sent = latest_send(task)
        late = sent is not None and now - sent.submitted_at >= timedelta(seconds=POLL_BOUND)
        phase, error = (NO_ROW_LATE_PHASE if late else NO_ROW_PHASE), strays or task.error
    else:
        phase = AMBIGUOUS_PHASE
        said = (
            f"The worker searched Ember's history for attempt {number}, whose answer was "
            f"lost: {len(found.originals)} original(s) of this task, {len(found.mine)} naming "
            "that attempt. It takes one on its own only when it is the task's one original "
            "and names that attempt."
        )
        notes = [said, _listed(found.originals), _refused_note(found.carried), strays]
        error = " ".join(filter(None, notes))
    if (phase, error) == (task.phase, task.error):
        return task
    return update(task, expected=task.version, phase=phase, error=error)


def _listed(originals: list[dict[str, Any]]) -> str:
    """Name the task's originals found, for the person who decides: none is copied or released."""
    if not originals:
        return ""
    named = [
        f"job {row.get('job_id') or '?'} (image {row_image(row)}, attempt {_attempt_of(row)})"
        for row in originals[:LISTED]
    ]
    if len(originals) > LISTED:
        named.append(f"{len(originals) - LISTED} more")
    return f"Found: {', '.join(named)}; each still protected in Ember, none copied or released."


def _attempt_of(row: dict[str, Any]) -> str:
    attempt = row["source_metadata"].get("attempt")
    return str(attempt) if type(attempt) is int else "?"
