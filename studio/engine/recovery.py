"""A person's ways out of `uncertain` and the other RECONCILABLE states (docs/design.md §8).

Reconcile reads Ember's history and hands the task back to the worker, which owns every
copy; resubmit sends the task again as a new attempt, a person's explicit choice.
"""

import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from studio import originals
from studio.ember.answers import kept_result
from studio.ember.client import (
    EmberBadAnswer,
    EmberClient,
    EmberError,
    EmberUnknownOutcome,
    Job,
)
from studio.engine import earlier_jobs
from studio.engine.errors import RESUBMIT_STALE, RESUBMIT_TOO_EARLY, ResubmitRefused
from studio.engine.history_rows import (
    HELD_PHASE,
    carries,
    held_note,
    is_usable,
    names_any,
    not_held,
    row_image,
    strays_note,
    unsafe_ids,
)
from studio.engine.lost_sends import reconcilable
from studio.models import Asset, Attempt, Kind, Task, TaskState
from studio.phrases import (
    COPYING_PHASE,
    GONE_PHASE,
    LEFT_IN_EMBER,
    NO_ROW_LATE_PHASE,
    NO_ROW_PHASE,
)
from studio.store import Conflict, move, update

REFUSED_SHOWN = 3  # unsafe ids a reconcile names on the task; the rest are counted

RECORDING_HISTORY = "Recording Ember's history entry (the original is already held)"


@dataclass(frozen=True)
class Reconciled:
    """What one reconcile did: the task as it now is, and why Ember was not asked, if it was not."""

    task: Task
    unasked: EmberError | None = None  # Ember unreachable or refusing: its history was not read


def history_unread(exc: EmberError) -> str:
    """Say, for people, that Ember's history could not be read, and why.

    A read whose answer did not come is not said as the client says a send's ("failed
    after sending"): beside a history search, that read as if a paid submit had gone out
    (a review).
    """
    if isinstance(exc, EmberUnknownOutcome):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "none came"
        return f"Ember's history could not be read: its answer did not come ({cause})"
    return f"Ember's history could not be read: {exc.message}"


def copy_gone(task: Task) -> bool:
    """Say whether a task's copy failed because Ember said it no longer has the image, and
    the archive lacks it: a reconcile hands it back all the same, and it is copied only if
    Ember has it back (or its file is put back in the archive, which the copy then takes)."""
    if task.state != TaskState.COPY_FAILED or task.phase != GONE_PHASE:
        return False
    image = task.saved("image")
    return originals.held_for(image.get("sha256"), image.get("mime")) is None


def reconcile(*, task: Task, client: EmberClient | None = None) -> Task:
    """Record what Ember's history says about a RECONCILABLE task and hand it back to the worker.

    Reconciliation never copies (the worker owns every copy) and never resubmits. When
    Ember could not be asked (unreachable, or refusing us) the task is left as it was and
    that EmberError is raised.
    """
    return async_to_sync(areconcile)(task=task, client=client)


def reconcile_outcome(*, task: Task, client: EmberClient | None = None) -> Reconciled:
    """Reconcile `task` (see `reconcile`) and say whether Ember could be asked at all."""
    return async_to_sync(_reconcile)(task, client)


async def areconcile(*, task: Task, client: EmberClient | None = None) -> Task:
    """Reconcile `task` (see `reconcile`, raising as it does); read Ember's history outside
    any transaction."""
    outcome = await _reconcile(task, client)
    if outcome.unasked is not None:
        raise outcome.unasked
    return outcome.task


async def _reconcile(task: Task, client: EmberClient | None) -> Reconciled:
    await sync_to_async(task.refresh_from_db)()
    done = task.state == TaskState.DONE
    if not await sync_to_async(reconcilable)(task):
        return Reconciled(task)
    if task.state == TaskState.COPY_FAILED and task.result:
        return Reconciled(
            await sync_to_async(_back_to_copying)(task, task.result, task.ember_job_id)
        )
    own_client = client is None
    client = client or EmberClient()
    jobs: list[Job] = []
    try:
        rows = await client.history(str(task.pk))
        if done:
            jobs = await earlier_jobs.look_up(task, client)
    except EmberBadAnswer as exc:
        if done:  # its phase says it is done: the caller says why nothing was learnt
            return Reconciled(task, exc)
        # An answer that cannot be used was still Ember's answer: it was asked, and the
        # task says what came back.
        phase = history_unread(exc)
        return Reconciled(await sync_to_async(update)(task, expected=task.version, phase=phase))
    except EmberError as exc:
        # Ember unreachable or refusing us: nothing learned about the task, so it stays as it
        # is (its phase says how far it got, not how a look-up went); the caller says why.
        return Reconciled(task, exc)
    finally:
        if own_client:
            await client.aclose()
    if done:
        return Reconciled(await sync_to_async(_name_lost_sends)(task, rows, jobs))
    return Reconciled(await sync_to_async(_record_history)(task, rows))


def _name_lost_sends(task: Task, rows: list[dict[str, Any]], jobs: list[Job]) -> Task:
    """Name on a done task the other paid originals Ember shows (lost_sends.py): in its
    history, each job on the attempt that sent it; of the earlier jobs asked about
    (`jobs`), those that succeeded; the originals on its error. It stays done."""
    carried = not_held(task, [row for row in rows if carries(row, task)])
    usable = _one_each([row for row in carried if is_usable(row)])
    with transaction.atomic():
        _learn_attempts(task, usable)
        own = _pick_row(task, usable)
        found = {row.get("job_id") for row in usable}
        asked = [row for row in earlier_jobs.settle(task, jobs) if row["job_id"] not in found]
        told = earlier_jobs.named(task)
        others = [row for row in usable + asked if row is not own]
        others = [row for row in others if row.get("job_id") not in told]
        earlier_jobs.mark_named(task, {str(row.get("job_id")) for row in others})
        note = _others_note(others)
        if not note or note in task.error:
            return task
        return update(task, expected=task.version, error=f"{task.error} {note}".strip())


def _record_history(task: Task, rows: list[dict[str, Any]]) -> Task:
    """Adopt the task's own row from Ember's history, or say what the history holds instead.

    Every other row is another paid original of this task (a submit whose answer
    was lost, or an earlier attempt): it is shown on the task and recorded on the
    attempt that sent it, but never copied, released or taken as this task's.
    """
    every = [row for row in rows if carries(row, task)]
    carried = not_held(task, every)
    usable = _one_each([row for row in carried if is_usable(row)])
    refused = _refused_note(carried)
    with transaction.atomic():
        _learn_attempts(task, usable)
        own = _pick_row(task, usable)
        others = [row for row in usable if row is not own]
        strays = strays_note(len(rows) - len(every))
        held_rows = [row for row in every if row not in carried]
        note = " ".join(filter(None, [_others_note(others), refused, held_note(held_rows), strays]))
        if own is not None:
            job_id = own.get("job_id") or ""
            return _back_to_copying(task, _adopted(own), job_id, note=note)
        phase, error = _no_row_phase(task, usable), note or task.error
        if held_rows and not usable:
            # Not "no row yet": there is one, not taken. The worker's own words about it
            # (the other task, the job to look up) stay when they name it (a review).
            phase = HELD_PHASE
            error = task.error if names_any(task.error, held_rows) else error
        if (phase, error) == (task.phase, task.error):
            # Nothing learnt: the task is left as it is, its version too, so that a person's
            # resubmit confirmation stays good however often cron reconciles (a review).
            if not Task.objects.filter(pk=task.pk, version=task.version).exists():
                raise Conflict()  # it moved while Ember was asked, as a write would find
            return task
        return update(task, expected=task.version, phase=phase, error=error)


def _refused_note(rows: list[dict[str, Any]]) -> str:
    """Say, for people, which history rows were not taken because of the ids they name."""
    unsafe = list(dict.fromkeys(shown for row in rows for shown in unsafe_ids(row)))
    if not unsafe:
        return ""
    named = ", ".join(unsafe[:REFUSED_SHOWN])
    if len(unsafe) > REFUSED_SHOWN:
        named += f" and {len(unsafe) - REFUSED_SHOWN} more"
    return (
        f"Ember's history names {named}: ids Avatars will not put in a URL. "
        "Those rows were not taken; nothing was fetched or released for them."
    )


def _pick_row(task: Task, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Return the task's own row among `rows`, or None.

    Once the task has an original, its own row is the one about that image: a row
    of another attempt must never lend it a history id. Before that, the row of the
    task's job; when the last submit's answer was lost (no job id), the row of the job
    history has since named for that submit (a row naming its attempt, `_learn_attempts`);
    else the one row that no other attempt of the task has recorded, if there is exactly
    one. (A restored install may meet rows of sends only the lost install made: a row
    naming an attempt it never had is another paid original, not a rival for its own.)
    """
    if task.asset_id is not None:
        image_id = Asset.objects.filter(pk=task.asset_id).values_list("ember_image_id", flat=True)
        own_image = image_id.first()
        return next((r for r in rows if own_image and row_image(r) == own_image), None)
    job = task.ember_job_id or _latest_job(task)
    if job:
        return next((r for r in rows if r.get("job_id") == job), None)
    candidates = _unclaimed(task, rows)
    return candidates[0] if len(candidates) == 1 else None


def latest_send(task: Task) -> Attempt | None:
    """Return the task's latest send: a failed resubmit is not it, the one before it is
    (as in `_unclaimed`)."""
    return task.attempts.sends().first()


def _latest_job(task: Task) -> str:
    """Return the job of the task's latest send ("" when its answer is still unknown)."""
    latest = latest_send(task)
    return latest.ember_job_id if latest is not None else ""


def _unclaimed(task: Task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the rows whose job no attempt but the task's latest has recorded.

    An attempt whose job failed does not count as the latest (a person's resubmit
    that failed leaves the send before it as the task's own), and its job is claimed.
    """
    attempts = task.attempts.order_by("number").values_list("ember_job_id", "outcome")
    failed = {job for job, outcome in attempts if outcome == Attempt.Outcome.FAILED}
    jobs = [job for job, outcome in attempts if outcome != Attempt.Outcome.FAILED]
    claimed = {job for job in jobs[:-1] if job} | failed
    return [row for row in rows if row.get("job_id") not in claimed]


def _learn_attempts(task: Task, rows: list[dict[str, Any]]) -> None:
    """Record a row's job on the attempt that sent it (its `source_metadata.attempt`).

    Only an attempt whose answer was lost (no job id yet) learns its job this way,
    so each paid original Ember's history shows ends up named on its own attempt.
    """
    lost = {a.number: a for a in task.attempts.filter(ember_job_id="")}
    known = set(task.attempts.exclude(ember_job_id="").values_list("ember_job_id", flat=True))
    for row in rows:
        number, job_id = (row.get("source_metadata") or {}).get("attempt"), row.get("job_id")
        attempt = lost.get(number) if type(number) is int else None
        if attempt is None or not job_id or job_id in known:
            continue
        seen = f"Ember's history shows it arrived: job {job_id}, image {row_image(row)}."
        # Accepted, as a 202 would have said: "unknown" beside a known job read as a
        # contradiction in the admin (a kill review).
        accepted = Attempt.Outcome.ACCEPTED
        update(
            attempt, ember_job_id=job_id, outcome=accepted, error=f"{attempt.error} {seen}".strip()
        )
        known.add(job_id)
        del lost[attempt.number]


def _adopted(row: dict[str, Any]) -> dict[str, Any]:
    """Return the row's answer with the history id taken from the row itself.

    A repaired row has its own `id` while the answer nested in it may still say
    `history: null`; finish() reads the id from the saved answer.
    """
    result = kept_result(row["result"])
    own_id = row.get("id")
    history_id = own_id if isinstance(own_id, str) and own_id else None
    history_id = history_id or (result.get("history") or {}).get("id")
    if history_id:
        result["history"], result["history_error"] = {"id": history_id}, None
    return result


def _one_each(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the first row about each image: a row Ember lists twice is one original.

    Found by a review: the task's own row, listed twice, was taken for a rival (no row
    adopted) or shown as "another paid original" of the very image being copied.
    """
    first: dict[str, dict[str, Any]] = {}
    for row in rows:
        first.setdefault(row_image(row), row)
    return list(first.values())


def _others_note(others: list[dict[str, Any]]) -> str:
    """Describe, for people, paid originals of this task that Avatars did not take."""
    if not others:
        return ""
    if len(others) == 1:
        row = others[0]
        return (
            f"{LEFT_IN_EMBER}another paid original of this task, still protected "
            f"in Ember: job {row.get('job_id') or '?'}, image {row_image(row)}. "
            "Avatars did not copy it and does not release it."
        )
    listed = ", ".join(f"job {r.get('job_id') or '?'} (image {row_image(r)})" for r in others)
    return (
        f"{LEFT_IN_EMBER}{len(others)} other paid originals of this task, still "
        f"protected in Ember: {listed}. Avatars did not copy them and does not release them."
    )


def _no_row_phase(task: Task, rows: list[dict[str, Any]]) -> str:
    """Say, for people, why no row of Ember's history was taken as the task's own."""
    if task.asset_id is not None:
        return "Ember's history has no row for this task's image yet"
    if not task.ember_job_id and not _latest_job(task) and len(_unclaimed(task, rows)) > 1:
        return "Ember's history has several rows this submit could be; none was taken"
    # As the worker's search says it: a reconcile's "yet" took the place of its advice that
    # a person decides, and the two took turns as cron and the search ran (a review).
    # Only for a lost submit: a job Ember named may still be running past the poll bound.
    lost = not task.ember_job_id and not _latest_job(task)
    if lost and task.submitted_at is not None and task.poll_bound_passed():
        return NO_ROW_LATE_PHASE
    if task.phase == NO_ROW_PHASE:
        return NO_ROW_PHASE
    return "Ember's history has no row for this task yet"


def _back_to_copying(task: Task, result: dict[str, Any], job_id: str, *, note: str = "") -> Task:
    """Hand the task back to the worker to copy the original Ember's answer `result` names."""
    with transaction.atomic():
        latest = task.attempts.order_by("-number").first()
        if job_id and not task.ember_job_id and latest is not None and not latest.ember_job_id:
            # The lost answer of the task's latest submit: this is its job.
            update(latest, ember_job_id=job_id, outcome=Attempt.Outcome.ACCEPTED)
        return move(
            task,
            TaskState.COPYING,
            expected=task.version,
            result=result,
            # A job id the task already has is never replaced by another row's.
            ember_job_id=task.ember_job_id or job_id,
            # With the bytes already held, only the history entry is left to record.
            phase=RECORDING_HISTORY if _held(task) else COPYING_PHASE,
            error=note,
        )


def _held(task: Task) -> bool:
    """Say whether the archive holds the file of the task's asset: judged by its row alone,
    a review's reconcile said "the original is already held" of a file that was gone."""
    asset = None if task.asset_id is None else Asset.objects.filter(pk=task.asset_id).first()
    return asset is not None and bool(originals.holds(asset.sha256, asset.mime))


def resubmit(*, task: Task, seen_version: int, confirmed_not_received: bool = False) -> Task:
    """Send an uncertain task again, as a new attempt: a person's explicit choice.

    Allowed once the worker's poll bound has passed since the last submit, or when
    the person confirms they checked Ember and it did not receive this. The choice is
    about the task as the person saw it (`seen_version`): a confirmation posted again
    after that resubmit was sent (and its answer lost in turn) would otherwise pay for
    a send nobody looked at.
    """
    task.refresh_from_db()
    # The change first: a second tab's confirmation, after the first tab's resubmit, was
    # told only that the task is not uncertain, where another person had acted (a review).
    if task.version != seen_version:
        raise ResubmitRefused(RESUBMIT_STALE)
    if task.state != TaskState.UNCERTAIN:
        raise ResubmitRefused("Only an uncertain task can be resubmitted.")
    if not task.poll_bound_passed() and not confirmed_not_received:
        raise ResubmitRefused(RESUBMIT_TOO_EARLY)
    return move(
        task,
        TaskState.QUEUED,
        expected=task.version,
        phase="Resubmitted by a person",
        error="",
        ember_job_id="",
        result=None,
        # A clip resubmitted on purpose is a new intent to pay: it needs a new key.
        idempotency_key=uuid.uuid4().hex if task.kind == Kind.CLIP else "",
    )
