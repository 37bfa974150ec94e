"""The worker's database side (docs/design.md §6.2-§6.7): what each step writes.

Every function here runs on the worker's one database thread (`db`), never on
the event loop: the wake-up table, recording what a submit proved, recording a
copied original, parking a failed step and the heartbeat. The request body and
the reading of frozen references live here too: they are what a submit is made of.
"""

import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, transaction
from django.utils import timezone

from studio import names, originals, phrases
from studio.ember.client import (
    SOURCE_APP,
    EmberAuthError,
    EmberBusy,
    EmberError,
    EmberNotFound,
    EmberRejected,
    EmberUnavailable,
    EmberUnsafeId,
    Job,
    Submitted,
)
from studio.models import ACTIVE, Asset, Attempt, Kind, Origin, Task, TaskState
from studio.store import Conflict, fitted, move, update
from studio.worker import named_twice, turns
from studio.worker.credentials import AUTH_BACKOFF
from studio.worker.pacing import resend_delay

UNREACHABLE_BACKOFF = 10.0  # seconds before re-sending after nothing reached Ember
CRASH_BACKOFF = 60.0  # seconds before a task whose step raised is tried again

MAY_HAVE_REACHED = phrases.MAY_HAVE_REACHED
RECONCILE_PHASE = phrases.RECONCILE_PHASE
UNSAFE_ID_PHASE = "Ember named an id Avatars will not use; look the job up in Ember"
COPY_FAILED_PHASE = "The copy from Ember failed; reconcile to retry"
NOTHING_MORE_SENT = (
    "Nothing more was sent to Ember for this task: its paid original may still be protected there."
)

# What a submit got back: a job, a typed refusal, or None when the answer could not be read.
Answer = Submitted | EmberError | None

log = logging.getLogger("studio.worker")

P = ParamSpec("P")
R = TypeVar("R")


def db(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run an ORM function on the worker's one database thread, in its turn (turns.py)."""
    call = sync_to_async(fn, thread_sensitive=True)

    async def ordered(*args: P.args, **kwargs: P.kwargs) -> R:
        gate = turns.GATE.get()
        if gate is None:
            return await call(*args, **kwargs)
        await gate.enter()
        try:
            return await call(*args, **kwargs)
        finally:
            gate.leave()

    return ordered


# --- what a submit is made of (§6.5) --------------------------------------------------


def build_payload(task: Task, references: list[dict[str, Any]], *, attempt: int) -> dict[str, Any]:
    """Return the asynchronous door's request body for `task` (docs/ember.md)."""
    return {
        "kind": task.kind,
        "provider": task.provider,
        "model": task.model or None,
        "prompt": task.prompt,
        "frame": task.frame,
        "references": references,
        "source_metadata": {
            "source_app": SOURCE_APP,
            "purpose": "exploration",
            "batch_id": str(task.batch_id),
            "task_id": str(task.pk),
            "attempt": attempt,
            "subjects": [str(s) for s in task.subjects],
            "frame": task.frame,
            "candidate": task.ordinal,
        },
    }


def _read_references(frozen: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Return the frozen references read, re-hashed and encoded; None if one is gone or changed."""
    out = []
    for ref in frozen:
        try:
            data = originals.read(ref["sha256"], ref["mime"])
        except (OSError, ValueError, originals.ChecksumFailed):
            return None
        out.append(
            {
                "name": ref["name"],
                "sha256": ref["sha256"],
                "mime": ref["mime"],
                # Bytes, not text: spliced into the body as they are (encode_payload).
                "data": base64.b64encode(data),
            }
        )
    return out


def _attempt_number(task: Task, sent: Attempt | None) -> int:
    """Return the number the next send is: a clip re-sent under its key keeps its number.

    `sent` is `task.attempt_under_key()`, already read by the caller.
    """
    if sent is not None:
        return sent.number
    if task.submitted_at is None:
        # Attempts are recorded only once a send was announced (`submitting` sets
        # submitted_at, and nothing clears it): a task never sent has none to count.
        return 1
    return task.attempts.count() + 1


# --- what a submit proved (docs/ember.md §Submit outcomes) ----------------------------


def _record_accepted(task: Task, submitted: Submitted, number: int, now: datetime) -> Task:
    """Record a 202 that arrived at `now`: the very next write is `running` with the job id."""
    with transaction.atomic():
        # A clip sent before under its key is that attempt, now with its job (Ember
        # answers every send under one key with the same job). An image's accepted
        # submit is always a new job.
        sent = task.attempt_under_key()
        if sent is None and task.kind == Kind.CLIP:
            # Recorded before attempts carried the key: the same job is the same attempt.
            sent = task.attempts.filter(ember_job_id=submitted.job_id).first()
        holder = named_twice.holder(submitted.job_id, besides=sent)
        if holder is not None:  # not this send's job: following it would file another's image
            return named_twice.rest(task, submitted.job_id, number, now, sent=sent, holder=holder)
        if sent is None:
            Attempt.objects.create(
                task=task,
                number=number,
                idempotency_key=task.idempotency_key,
                ember_job_id=submitted.job_id,
                submitted_at=task.submitted_at or now,
                answered_at=now,
                outcome=Attempt.Outcome.ACCEPTED,
            )
        else:
            update(
                sent,
                idempotency_key=task.idempotency_key,
                ember_job_id=submitted.job_id,
                answered_at=now,
                outcome=Attempt.Outcome.ACCEPTED,
            )
        return move(
            task,
            TaskState.RUNNING,
            ember_job_id=submitted.job_id,
            phase=phrases.GENERATING_PHASE,
            error="",
        )


def _record_refusal(task: Task, exc: EmberError, number: int) -> Task:
    """Record what a failed submit proves, row by row of docs/ember.md's Submit outcomes."""
    requeue = _not_accepted(exc)
    if requeue is not None:
        wait, phase = requeue
        return _requeue(task, wait, phase, error=exc.message)
    if isinstance(exc, EmberRejected | EmberNotFound):
        if task.attempts.exists():
            # An earlier send (a clip's under this key, or the one a person resubmitted)
            # may have made a paid job: this refusal says nothing about it.
            return _rest_sent_before(task, f"Ember refused this send ({exc.message})")
        return move(task, TaskState.FAILED, phase="Ember refused this request", error=exc.message)
    # The request may have reached Ember: it is an attempt, and may have been paid for.
    with transaction.atomic():
        _record_unknown_attempt(task, exc.message, number=number)
        # A clip accepted under an unsafe id would get the same id back if re-sent.
        if task.kind == Kind.CLIP and not isinstance(exc, EmberUnsafeId):
            phase = "Ember's answer was lost; re-sending under the same key"
            first = task.attempts.get(idempotency_key=task.idempotency_key).submitted_at
            wait = resend_delay((timezone.now() - first).total_seconds())
            return _requeue(task, wait, phase, error=exc.message)
        return move(
            task,
            TaskState.UNCERTAIN,
            phase=RECONCILE_PHASE,
            error=f"{MAY_HAVE_REACHED} ({exc.message})",
        )


def _not_accepted(exc: EmberError) -> tuple[float, str] | None:
    """Return (seconds to wait, phase) for an answer proving nothing was accepted, else None."""
    if isinstance(exc, EmberUnavailable):
        return UNREACHABLE_BACKOFF, phrases.UNREACHABLE_PHASE
    if isinstance(exc, EmberBusy):
        # No figure: stored text would still say "in 40 s" long after; the batch page
        # counts down from next_attempt_at instead.
        return exc.retry_after, phrases.BUSY_PHASE
    if isinstance(exc, EmberAuthError):
        return AUTH_BACKOFF, phrases.AUTH_PHASE
    return None


def _requeue(
    task: Task, wait: float, phase: str, *, error: str, expected: int | None = None
) -> Task:
    """Put `task` back in the queue, due in `wait` seconds, saying why on the task."""
    return move(
        task,
        TaskState.QUEUED,
        expected=expected,
        due=timezone.now() + timedelta(seconds=wait),
        phase=phase,
        error=error,
    )


def _record_unknown_attempt(task: Task, error: str, *, number: int | None = None) -> None:
    """Record a submit that may have been paid for as an attempt with no job id yet.

    A clip already sent under its key is already that attempt: nothing new is recorded.
    """
    if task.attempt_under_key() is not None:
        return
    Attempt.objects.create(
        task=task,
        number=number or task.attempts.count() + 1,
        idempotency_key=task.idempotency_key,
        submitted_at=task.submitted_at or timezone.now(),
        outcome=Attempt.Outcome.UNKNOWN,
        error=error,
    )


# --- what a job's end and its copy leave (§6.6, §6.7) ---------------------------------


def _record_ended(task: Task, job: Job) -> bool:
    """Record a job Ember ended: `copying` with its answer saved, or `failed`; True for copying."""
    if job.status == "succeeded":
        move(
            task,
            TaskState.COPYING,
            result=job.result,
            phase=phrases.COPYING_PHASE,
            error="",
        )
        return True
    task.attempts.filter(ember_job_id=task.ember_job_id).update(outcome=Attempt.Outcome.FAILED)
    earlier = task.attempts.exclude(ember_job_id=task.ember_job_id).order_by("-number").first()
    if earlier is not None:
        # A person resubmitted it: the earlier send may still hold a paid original, and
        # is again the task's own (its job, or none when its answer was lost), so that
        # reconcile takes that send's row; the failed job stays on its attempt.
        _rest_sent_before(
            task,
            f"Ember's job {task.ember_job_id} failed ({job.error})",
            ember_job_id=earlier.ember_job_id,
        )
        return False
    move(task, TaskState.FAILED, phase="Ember could not generate this", error=job.error)
    return False


def _reference_changed(task: Task) -> Task:
    """Stop a task whose frozen reference no longer matches: nothing more is sent for it.

    `failed`, unless an earlier send (a resubmit's, a clip's under its key) may have made
    a paid job: then `uncertain`, where reconcile can still collect it. Versioned: a
    cancel that won while the references were read stands.
    """
    if task.attempts.exists():
        return move(
            task,
            TaskState.UNCERTAIN,
            expected=task.version,
            phase=RECONCILE_PHASE,
            error=f"{phrases.REFERENCE_CHANGED} {MAY_HAVE_REACHED}",
        )
    return move(
        task,
        TaskState.FAILED,
        expected=task.version,
        phase="Failed",
        error=phrases.REFERENCE_CHANGED,
    )


def _rest_sent_before(task: Task, what: str, **fields: Any) -> Task:
    """Rest `uncertain` a task whose last send came to nothing while an earlier may be paid.

    Not `failed`: nothing reconciles a failed task, and the earlier send's original
    would stay in Ember, paid for and never collected.
    """
    return move(
        task,
        TaskState.UNCERTAIN,
        phase=RECONCILE_PHASE,
        error=f"{what}, but an earlier send may have reached Ember. "
        "Check history before submitting again.",
        **fields,
    )


def _rest_unsafe(task: Task, exc: EmberUnsafeId) -> Task:
    """Rest a task `uncertain` whose job or image Ember named with an unsafe id.

    Not `failed`: Ember may hold a paid, protected original of it, which a person
    can look up in Ember; nothing here may ask about it.
    """
    return move(
        task,
        TaskState.UNCERTAIN,
        phase=UNSAFE_ID_PHASE,
        error=f"{exc.message} {NOTHING_MORE_SENT}",
    )


def _rest_unknown(task: Task) -> Task:
    """Rest a task whose job Ember answers 404 for `uncertain`; nothing is resubmitted."""
    error = f"Ember does not know job {task.ember_job_id}. Nothing was resubmitted."
    return move(task, TaskState.UNCERTAIN, phase=RECONCILE_PHASE, error=error)


def record_asset(task: Task, original: originals.Original) -> Asset | None:
    """Write the generated original's row (with its history id when Ember sent one); None
    when another task's original already is the image (the task then rests uncertain)."""
    image, history = task.saved("image"), task.saved("history")
    metadata = image.get("metadata") or {}
    holder = named_twice.image_holder(task, image.get("id", ""))
    if holder is not None:
        named_twice.rest_image_held(task, image["id"], holder)
        return None
    with transaction.atomic():
        asset = Asset.objects.create_stored(
            original,
            file_name=f"{task.provider}-{task.frame}-{task.ordinal}{original.info.extension}",
            label=names.generated(task.provider_label, task.frame, task.ordinal),
            origin=Origin.GENERATED,
            references=[r["asset"] for r in task.references],
            task=task,
            batch_id=task.batch_id,
            workflow="exploration",
            ember_image_id=image.get("id", ""),
            ember_history_id=history.get("id", "") or "",
            provider=fitted(Asset, "provider", metadata.get("provider") or task.provider),
            model=fitted(Asset, "model", metadata.get("model") or task.model),
            prompt=task.prompt,
            upstream=task.result,
        )
        # A new row has no subjects yet: insert the links without reading them first.
        Asset.subjects.through.objects.bulk_create(
            Asset.subjects.through(asset_id=asset.pk, subject_id=subject_id)
            for subject_id in task.subjects
        )
        update(task, asset=asset)
    return asset


def _rest(task: Task, asset: Asset, released: bool | None) -> Task:
    """Write `done` when the asset has its history id, else `history_missing` saying why;
    a note of other paid originals left in Ember stays (nothing would say it again)."""
    left = phrases.left_in_ember(task.error)
    if asset.ember_history_id:
        return move(
            task, TaskState.DONE, phase="Complete", error=left, protection_released=released
        )
    image_id = task.saved("image").get("id")
    if image_id != asset.ember_image_id:
        error = (
            f"The saved answer is about image {image_id}, not this task's image "
            f"{asset.ember_image_id}; its history was not used."
        )
    else:
        error = task.saved_history_error() or "Ember did not write its history row."
    return move(
        task,
        TaskState.HISTORY_MISSING,
        phase="Original saved; history needs repair",
        error=f"{error} {left}".strip(),
        protection_released=released,
    )


# --- a failed step, the heartbeat (§6.4) ----------------------------------------------


def _postpone(task_id: str, error: str) -> None:
    """Park a task whose step raised, so it is not retried in a tight loop: one caught in
    `preparing` goes back to `queued` (nothing was sent); one
    caught in `submitting` is left to the pump's sweep (the wake-up table), which
    knows what an interrupted submit may mean. The write is versioned: a cancel
    that lands between this read and this write stands.
    """
    task = Task.objects.get(pk=task_id)
    state = TaskState.QUEUED if task.state == TaskState.PREPARING else task.state
    if state in ACTIVE:
        due = timezone.now() + timedelta(seconds=CRASH_BACKOFF)
        with contextlib.suppress(Conflict):
            move(task, TaskState(state), expected=task.version, due=due, error=error[:2000])


# --- the wake-up table (§6.2) ---------------------------------------------------------

STRANDED = (TaskState.PREPARING, TaskState.SUBMITTING)  # states that only a coroutine holds
NOT_SENT_PHASE = "Ember did not take it" + phrases.RETRIES_ITSELF


def _wake_stranded(
    *, in_hand: list[str], answers: dict[str, Answer], unsettled: set[str]
) -> dict[str, int]:
    """Settle each task mid-step that no coroutine holds; return counts by state.

    `answers` holds what Ember answered to submits whose recording failed: an answer
    that proves nothing was accepted must not read as "may have reached Ember". A task
    whose write fails again goes into `unsettled`: its answer is still needed.
    """
    counts = {"preparing": 0, "submitting": 0}
    for task in Task.objects.filter(state__in=STRANDED).exclude(pk__in=in_hand):
        state = task.state
        try:
            if state == TaskState.SUBMITTING and str(task.pk) in answers:
                _settle(task, answers[str(task.pk)])
            else:
                _wake(task)
        except Conflict:
            continue  # a cancel (or another writer) moved it first: its write stands
        except DatabaseError:
            # One task whose write fails must not keep the others stranded: the next
            # sweep tries it again.
            log.exception("task=%s could not be settled; trying again next tick", task.pk)
            unsettled.add(str(task.pk))
            continue
        counts[state] += 1
    return counts


def _settle_unrecorded(task_id: str, answer: Answer, detail: str) -> None:
    """Settle a `submitting` task whose answer could not be read or recorded."""
    task = Task.objects.get(pk=task_id)
    if task.state != TaskState.SUBMITTING:
        return  # the answer was recorded after all, or another writer moved it
    with contextlib.suppress(Conflict):
        _settle(task, answer, detail=detail)


def _settle(task: Task, answer: Answer, *, detail: str = "") -> None:
    """Put a `submitting` task where Ember's answer (if it proves anything) or the table says."""
    if isinstance(answer, Submitted):
        # Ember accepted it and the job is known: recorded now, `running` (its first
        # recording failed, on a full disk), not "may have reached Ember" with the job id
        # in the log only (a review: 16 tasks waited 300 s for the history search).
        number = max(task.attempts.values_list("number", flat=True), default=0) + 1
        _record_accepted(task, answer, number, timezone.now())
        return
    if isinstance(answer, EmberError) and not answer.may_have_arrived:
        # Nothing was accepted: back to `queued` after a pause, never "may have reached".
        _requeue(task, CRASH_BACKOFF, NOT_SENT_PHASE, error=answer.message, expected=task.version)
    else:
        # A clip accepted under an unsafe id would get the same id back if re-sent.
        _wake(task, detail=detail, resend=not isinstance(answer, EmberUnsafeId))


def _wake(task: Task, *, detail: str = "", resend: bool = True) -> None:
    """Move a task left mid-step to where the wake-up table says, with versioned writes.

    `detail`, when known, says on the attempt why its outcome is unknown; without
    `resend` a clip rests `uncertain` like an image instead of going out again.
    """
    expected = task.version
    if task.state == TaskState.PREPARING:
        # Nothing left the building; a clip's key makes a restart free.
        move(task, TaskState.QUEUED, expected=expected, phase=phrases.QUEUED_PHASE)
        return
    with transaction.atomic():
        # Either kind may have been paid for: the send is an attempt (for a clip, the one
        # its key stands for, which also makes it too late to cancel).
        _record_unknown_attempt(task, detail or MAY_HAVE_REACHED)
        if task.kind == Kind.CLIP and resend:
            move(task, TaskState.QUEUED, expected=expected, phase="Re-sending under the same key")
        else:
            phase, error = RECONCILE_PHASE, MAY_HAVE_REACHED
            move(task, TaskState.UNCERTAIN, expected=expected, phase=phase, error=error)
