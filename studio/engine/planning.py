"""Planning a batch: generate, its daily cap and its idempotency key (docs/design.md §5, §11).

Nothing is sent to Ember here: the batch and its tasks are written `queued`, and the
worker picks them up; `progress` counts how far the planned tasks have got since.
"""

import hashlib
import json
import math
import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce
from django.utils import timezone

from studio import phrases
from studio.engine.errors import (
    SPEND_WINDOW_HOURS,
    InvalidRequest,
    KeyReused,
    RepeatedBatch,
    SpendCapReached,
)
from studio.engine.validation import validate
from studio.models import FINAL, Asset, Attempt, Batch, BatchKey, Kind, Task, TaskState

# A plan of what its person planned this recently asks first, when the caller says so.
SAME_BATCH_WINDOW = timedelta(minutes=10)


def generate(
    *,
    request: dict[str, Any],
    user: User | None = None,
    key: str = "",
    ask_if_repeated: bool = False,
    asking_again: Batch | None = None,
) -> Batch:
    """Validate `request` and write the batch with all its tasks queued, in one transaction.

    With `key` (one of `user`'s idempotency keys), the same key with the same request
    within `BatchKey.LIFETIME` returns the batch the first one planned and plans
    nothing; the same key with another request raises KeyReused. A request past a cap
    raises InvalidRequest; past `user`'s daily cap, SpendCapReached. With
    `ask_if_repeated`, a request of the same intent as a batch `user` planned within
    SAME_BATCH_WINDOW (by another key) raises RepeatedBatch, looked for in the
    transaction that plans, so two of them sent at once cannot both miss the other;
    `asking_again` widens that to every batch since it (`recent_twin`).
    Nothing is sent to Ember here: the worker picks the tasks up.
    """
    if key:
        if user is None:
            raise ValueError("An idempotency key belongs to a user.")
        return _generate_once(
            request=request, user=user, key=key, ask=ask_if_repeated, asking_again=asking_again
        )
    plan = validate(request)
    with transaction.atomic():
        return _write_plan(plan, user, ask=ask_if_repeated, asking_again=asking_again)


def recent_twin(
    request: dict[str, Any],
    user: User | None,
    *,
    key: str = "",
    asking_again: Batch | None = None,
) -> Batch | None:
    """Return a batch `user` planned within SAME_BATCH_WINDOW that `request` repeats, or None.

    It repeats it when it would make some of the same images again (`repeats`): the same
    batch, or one changed after going Back to its form (a provider added, say). Batches
    `key` planned are left out: the same key again is answered with its batch. A request
    `asking_again` for a batch's failed images does not repeat that batch, and repeats any
    batch since it, however long ago and whoever planned it: a review asked again for two
    failed images four times over (Back, the link again), each time paying again.
    """
    if user is None:
        return None
    own = BatchKey.objects.filter(user=user, key=key).values("batch")
    since = timezone.now() - SAME_BATCH_WINDOW
    recent = Batch.objects.exclude(pk__in=own).order_by("-created_at")
    if asking_again is None:
        recent = recent.filter(created_by=user)
    else:  # whoever asked again first: one family's images
        since = min(since, asking_again.created_at)
        # Of its prompt only, so that the 50 looked at are never others' (a re-review
        # planned 50 batches in between, and the same images were paid for again).
        prompt = str(request.get("prompt") or "").strip()
        recent = recent.exclude(pk=asking_again.pk).filter(request__prompt=prompt)
    recent = recent.filter(created_at__gte=since)
    return next((b for b in recent[:50] if repeats(request, b.request)), None)


def planned_by(user: User, key: str) -> Batch | None:
    """Return the batch `user`'s `key` planned within its lifetime, whatever it asked for."""
    row = _key_row(user, key)
    return row.batch if row is not None else None


def repeats(request: dict[str, Any], earlier: dict[str, Any]) -> bool:
    """Say whether `request` asks for some of the images `earlier` asked for: the same prompt
    and subjects, and a provider and a framing in common."""
    now, then = _intent(request), _intent(earlier)
    return (
        (now.prompt, now.subjects) == (then.prompt, then.subjects)
        and bool(now.providers() & then.providers())
        and bool(set(now.frames) & set(then.frames))
    )


def same_intent(request: dict[str, Any], earlier: dict[str, Any]) -> bool:
    """Say whether two requests are the same batch: prompt, subjects, candidates, framings."""
    return _intent(request) == _intent(earlier)


class Intent(NamedTuple):
    """What a request asks for, in a form two requests compare in."""

    prompt: str
    subjects: list[Any]
    candidates: list[tuple[str, int]]  # by provider, sorted
    frames: list[str]

    def providers(self) -> set[str]:
        return {provider for provider, n in self.candidates if n}


def _intent(request: dict[str, Any]) -> Intent:
    """Return what makes a request's intent: prompt, subjects, candidates by provider, frames."""
    asked: dict[str, int] = {}
    for row in request.get("providers") or []:
        asked[row["provider"]] = asked.get(row["provider"], 0) + row.get("candidates", 1)
    return Intent(
        str(request.get("prompt") or "").strip(),
        sorted(request.get("subjects") or []),
        sorted(asked.items()),
        sorted(set(request.get("frames") or [])),
    )


def _generate_once(
    *, request: dict[str, Any], user: User, key: str, ask: bool, asking_again: Batch | None
) -> Batch:
    """Plan `request` unless `key` already did; the plan and the key commit together."""
    body_sha256 = canonical_sha256(request)
    first = _keyed_batch(user=user, key=key, request=request, body_sha256=body_sha256)
    if first is not None:
        return first
    plan = validate(request)
    try:
        with transaction.atomic():
            # Asked again inside: a twin may have committed since (on SQLite this
            # transaction now holds the write lock, so none can commit until it ends).
            first = _keyed_batch(user=user, key=key, request=request, body_sha256=body_sha256)
            if first is not None:
                return first
            batch = _write_plan(plan, user, key=key, ask=ask, asking_again=asking_again)
            _record_key(user=user, key=key, body_sha256=body_sha256, batch=batch)
    except (IntegrityError, SpendCapReached):
        # A concurrent request with this key committed first (the key is unique per
        # user), or its tasks filled the daily cap: this transaction planned nothing,
        # and the first batch stands. Without one, the refusal stands.
        first = _keyed_batch(user=user, key=key, request=request, body_sha256=body_sha256)
        if first is None:
            raise
        return first
    return batch


def canonical_sha256(request: object) -> str:
    """Hash `request` as canonical JSON: the same fields and values hash alike in any order."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _keyed_batch(
    *, user: User, key: str, request: dict[str, Any], body_sha256: str
) -> Batch | None:
    """Return the batch `key` planned within its lifetime, or None; KeyReused for a request
    asking for something else."""
    row = _key_row(user, key)
    if row is None:
        return None
    if row.body_sha256 != body_sha256 and not _asks_for(request, row.batch):
        raise KeyReused(row.batch)
    return row.batch


def _asks_for(request: dict[str, Any], batch: Batch) -> bool:
    """Say whether `request`, written otherwise than the body that planned `batch`, asks for
    the same: `2.0` for `2`, null for a field left out, a default named (a review's retry
    written so was a 422). Both are compared as validation reads them."""
    try:
        plan = validate(request)
    except InvalidRequest:
        return False
    return canonical_sha256(plan["request"]) == canonical_sha256(batch.request)


def _key_row(user: User, key: str) -> BatchKey | None:
    """Return `user`'s record of `key` while it is alive, with its batch."""
    alive = timezone.now() - BatchKey.LIFETIME
    rows = BatchKey.objects.select_related("batch")
    return rows.filter(user=user, key=key, created_at__gt=alive).first()


def _record_key(*, user: User, key: str, body_sha256: str, batch: Batch) -> None:
    """Record that `key` planned `batch`; call inside the transaction that writes the batch."""
    now = timezone.now()
    # Forget the user's expired keys first: an expired row would block this one.
    BatchKey.objects.filter(user=user, created_at__lte=now - BatchKey.LIFETIME).delete()
    BatchKey.objects.create(
        user=user, key=key, body_sha256=body_sha256, batch=batch, created_at=now
    )


def _check_user(
    plan: dict[str, Any], user: User, *, key: str, ask: bool, asking_again: Batch | None
) -> None:
    """Count the daily cap, and look for a twin (`ask`), after this user's plans are
    serialised, in the transaction that inserts: two concurrent plans of one user cannot
    both fit under the cap, nor both miss the other."""
    # Serialise this user's plans until the transaction ends: on PostgreSQL the row lock
    # on the user; SQLite's IMMEDIATE transactions already hold the write lock.
    list(User.objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
    _check_daily_cap(user, plan["tasks"])
    twin = recent_twin(plan["request"], user, key=key, asking_again=asking_again) if ask else None
    if twin is not None:
        raise RepeatedBatch(twin)


def _write_plan(
    plan: dict[str, Any],
    user: User | None,
    *,
    key: str = "",
    ask: bool = False,
    asking_again: Batch | None = None,
) -> Batch:
    """Write the planned batch and its tasks; call inside the transaction that commits them
    (the user's checks first, `_check_user`)."""
    if user is not None:
        _check_user(plan, user, key=key, ask=ask, asking_again=asking_again)
    _check_references_stand(plan["references"])
    now = timezone.now()
    batch = Batch.objects.create(title=plan["title"], request=plan["request"], created_by=user)
    rows = [
        (provider, frame, ordinal)
        for provider in plan["providers"]
        for frame in plan["frames"]
        for ordinal in range(1, provider["candidates"] + 1)
    ]
    Task.objects.bulk_create(
        Task(
            batch=batch,
            kind=Kind.CLIP if frame == "clip" else Kind.IMAGE,
            state=TaskState.QUEUED,
            phase=phrases.QUEUED_PHASE,
            provider=provider["provider"],
            provider_label=provider["label"],
            model=provider["model"],
            frame=frame,
            ordinal=ordinal,
            prompt=plan["prompt"],
            subjects=plan["subjects"],
            references=plan["references"],
            # A clip's key is chosen once, here: every re-send of this
            # intent carries it, so Ember never charges for it twice.
            idempotency_key=uuid.uuid4().hex if frame == "clip" else "",
            # Due a microsecond apart, in the page's order, the last one now: the worker
            # takes a batch top down on every database (PostgreSQL returns equal times in
            # any order), and all of it is due as soon as it is committed.
            next_attempt_at=now - timedelta(microseconds=len(rows) - 1 - place),
        )
        for place, (provider, frame, ordinal) in enumerate(rows)
    )
    return batch


def _check_references_stand(references: list[dict[str, Any]]) -> None:
    """Refuse a plan whose frozen photos were removed since they were read (InvalidRequest).

    Read in the planning transaction, the rows locked where the database can: a removal
    either committed before (and the plan is refused) or waits, then sees the tasks
    that froze its photo and only detaches it (studio/curation.py).
    """
    ids = [ref["asset"] for ref in references]
    standing = set(
        Asset.objects.select_for_update().filter(pk__in=ids).values_list("sha256", flat=True)
    )
    # Read once the rows are locked: a photo taken off every subject meanwhile is only
    # kept for what used it before (studio/curation.py), and is not sent again.
    held = set(
        Asset.subjects.through.objects.filter(asset_id__in=ids).values_list("asset_id", flat=True)
    )
    gone = [
        ref["name"]
        for ref in references
        if ref["sha256"] not in standing or ref["asset"] not in held
    ]
    if gone:
        raise InvalidRequest(
            f"The reference photo {gone[0]} was removed while this batch was planned; "
            "nothing was planned.",
            field="references",
        )


def jobs_left_today(user: User) -> int | None:
    """Return how many more paid tasks `user` may plan now under the daily cap (None: no cap)."""
    limit = settings.AVATARS_DAILY_TASK_CAP
    if not limit:
        return None
    since = timezone.now() - timedelta(hours=SPEND_WINDOW_HOURS)
    return max(0, limit - _tasks_planned_since(user, since))


def _check_daily_cap(user: User, more: int) -> None:
    """Raise SpendCapReached if `more` tasks would take `user` past the daily cap.

    The cap is on paid tasks: every task planned counts, whatever became of it since,
    except one cancelled before anything was sent for it (no attempt). It once counted
    those too, and a person who cancelled a batch in time was told of tasks "paid" that
    never were (a review in the browser).
    """
    limit = settings.AVATARS_DAILY_TASK_CAP
    if not limit:
        return
    now = timezone.now()
    window = timedelta(hours=SPEND_WINDOW_HOURS)
    planned = _tasks_planned_since(user, now - window)
    if planned + more <= limit:
        return
    retry_after = None
    if more <= limit:
        # The batch fits once the oldest `excess` of those are more than a window old.
        excess = planned + more - limit
        paid = _paid_since(user, now - window).order_by("created_at")
        oldest = paid.values_list("created_at", flat=True)[excess - 1 : excess]
        ages_out = oldest[0] + window if oldest else now + window  # (rows gone meanwhile)
        retry_after = max(1, math.ceil((ages_out - now).total_seconds()))
    raise SpendCapReached(planned=planned, more=more, limit=limit, retry_after=retry_after)


def _tasks_planned_since(user: User, since: datetime) -> int:
    """Count the tasks of `user`'s batches planned after `since` that are or may be paid."""
    return _paid_since(user, since).count()


def _paid_since(user: User, since: datetime) -> QuerySet[Task]:
    """The tasks of `user`'s batches planned after `since` that are or may be paid: all but
    those cancelled with no request sent."""
    sent = Attempt.objects.filter(task=OuterRef("pk"))
    planned = Task.objects.filter(batch__created_by=user, created_at__gt=since)
    return planned.exclude(Q(state=TaskState.CANCELLED) & ~Exists(sent))


def _new_send() -> Combinable:
    """Match a task `submitting` that was not sent before under its key: a send in flight
    that is no attempt yet (a clip re-sent under its key is the attempt it was sent as)."""
    under_key = Attempt.objects.filter(
        task=OuterRef("pk"), idempotency_key=OuterRef("idempotency_key")
    ).exclude(idempotency_key="")
    return Q(state=TaskState.SUBMITTING) & ~Exists(under_key)


def progress(*, batch: Batch) -> dict[str, int]:
    """Count the batch's tasks by state, plus `total`, `finished`, `sending` and `paid_requests`.

    `sending`: sends in flight that are no attempt yet (a task `submitting` that was not
    sent before under its key). Each may already be paid, so `paid_requests` counts them
    beside the attempts: a review's Ember had charged while the page said 0.
    """
    counts = {state.value: 0 for state in TaskState}
    new = _new_send()
    rows = batch.tasks.values("state").annotate(n=Count("pk"), new=Count("pk", filter=new))
    counts["sending"] = 0
    for row in rows:
        counts[row["state"]] = row["n"]
        counts["sending"] += row["new"]
    counts["total"] = sum(counts[s.value] for s in TaskState)
    counts["finished"] = sum(counts[s.value] for s in FINAL)
    attempts = Attempt.objects.filter(task__batch=batch).count()
    counts["paid_requests"] = attempts + counts["sending"]
    return counts


class Counted(NamedTuple):
    """A task as `counted_tasks` reads it, with its attempts and whether it is a new send."""

    task: Task
    attempts: int
    new_send: bool  # `submitting`, not sent before under its key (see `progress`)


def counted_tasks(batch: Batch) -> list[Counted]:
    """Return the batch's tasks, each with its attempts and whether it is a new send, read
    in one statement: one moment, however the worker moves them meanwhile.

    A review's answer, read in three statements, showed a task `running` with 0 attempts
    (written together) and progress that disagreed with its own task list.
    """
    attempts = (
        Attempt.objects.filter(task=OuterRef("pk"))
        .values("task")
        .annotate(n=Count("pk"))
        .values("n")
    )
    new = ExpressionWrapper(_new_send(), BooleanField())
    counted = batch.tasks.annotate(attempt_count=Coalesce(Subquery(attempts), 0), new_send=new)
    return [Counted(t, t.attempt_count, bool(t.new_send)) for t in counted]  # type: ignore[attr-defined]


def progress_of(tasks: list[Counted]) -> dict[str, int]:
    """Count `counted_tasks` as `progress` counts a batch's, from the same rows."""
    counts = {state.value: 0 for state in TaskState}
    for counted in tasks:
        counts[counted.task.state] += 1
    counts["total"] = len(tasks)
    counts["finished"] = sum(counts[s.value] for s in FINAL)
    counts["sending"] = len([counted for counted in tasks if counted.new_send])
    counts["paid_requests"] = sum(counted.attempts for counted in tasks) + counts["sending"]
    return counts


def retry_at(task: Task, now: datetime) -> datetime | None:
    """Return when a queued task waiting out a back-off (Ember busy or unreachable) is
    tried again; None when it is not waiting (due already, or not queued)."""
    due = task.next_attempt_at
    if task.state != TaskState.QUEUED or due is None or due <= now:
        return None
    return due
