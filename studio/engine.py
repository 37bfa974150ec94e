"""Services that touch several models, the store or Ember: generate, cancel, reconcile, publish.

Views, admin actions and commands call these; they never change task state themselves.
"""

import uuid
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.text import slugify

from studio import originals
from studio.ember.client import EmberClient, EmberError, check_result
from studio.models import (
    CANCELLABLE,
    FINAL,
    RECONCILABLE,
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    Kind,
    Origin,
    SetItem,
    Subject,
    Task,
    TaskState,
)
from studio.store import Conflict, move, update
from studio.worker import POLL_BOUND

FRAMES = ("image", "headshot", "full-body", "clip")
MAX_CANDIDATES = 8
MAX_TASKS = 200
MAX_PROMPT = 4000
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
TOO_LATE = "This task has already been sent to Ember; the work is kept."
ALREADY_ENDED = "This task has already ended; there is nothing to cancel."
SET_PUBLISHED = "This set is published; its choice can no longer change."


class InvalidRequest(ValueError):
    """A request that cannot be planned; the message says why, for people."""


class TooLate(Exception):
    """The task already reached Ember (or finished): it cannot be cancelled."""


class PublishRefused(Exception):
    def __init__(self) -> None:
        super().__init__(PUBLISH_REFUSED)


@dataclass
class BatchCancel:
    cancelled: list[Task] = field(default_factory=list)
    kept: list[Task] = field(default_factory=list)


# --- subjects, references, sets ------------------------------------------------


def create_subject(*, name: str) -> Subject:
    """Create a subject with a unique slug derived from `name`."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidRequest("A subject needs a name.")
    if len(name) > 120:
        raise InvalidRequest("A subject's name must be at most 120 characters.")
    base = slugify(name)[:120] or "subject"
    slug, n = base, 1
    while Subject.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return Subject.objects.create(name=name, slug=slug)


def add_reference(*, subject: Subject, data: bytes, file_name: str) -> Asset:
    """Store an uploaded reference photo for `subject` (raises originals.NotAnImage).

    The same photo uploaded twice is one original: the existing asset gains the subject.
    """
    original = originals.save(data)
    with transaction.atomic():
        asset, _created = Asset.objects.get_or_create(
            sha256=original.sha256,
            defaults={
                "file_name": (file_name or f"reference{original.info.extension}")[:255],
                "mime": original.info.mime,
                "width": original.info.width,
                "height": original.info.height,
                "size": original.size,
                "origin": Origin.UPLOADED,
                "label": subject.name,
            },
        )
        asset.subjects.add(subject)
    return asset


def create_set(*, name: str, asset_ids: list[Any]) -> AvatarSet:
    """Create a set holding the given assets in the given order."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidRequest("A set needs a name.")
    with transaction.atomic():
        avatar_set = AvatarSet.objects.create(name=name[:120])
        choose_assets(avatar_set=avatar_set, asset_ids=asset_ids)
    return avatar_set


def choose_assets(*, avatar_set: AvatarSet, asset_ids: list[Any]) -> AvatarSet:
    """Replace the set's choice with `asset_ids`, in that order."""
    if avatar_set.published_at is not None:
        raise InvalidRequest(SET_PUBLISHED)
    ids = _ids(asset_ids, "Assets")
    found = set(Asset.objects.filter(pk__in=_existing(ids)).values_list("pk", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidRequest(f"Unknown asset: {missing[0]}.")
    with transaction.atomic():
        avatar_set.items.all().delete()
        SetItem.objects.bulk_create(
            SetItem(avatar_set=avatar_set, asset_id=asset_id, position=position)
            for position, asset_id in enumerate(ids)
        )
        update(avatar_set)
    return avatar_set


def progress(*, batch: Batch) -> dict[str, int]:
    """Count the batch's tasks by state, plus `total`, `finished` and `paid_requests`."""
    counts = {state.value: 0 for state in TaskState}
    for row in batch.tasks.values("state").annotate(n=Count("pk")):
        counts[row["state"]] = row["n"]
    counts["total"] = sum(counts[s.value] for s in TaskState)
    counts["finished"] = sum(counts[s.value] for s in FINAL)
    counts["paid_requests"] = Attempt.objects.filter(task__batch=batch).count()
    return counts


# --- generate ---------------------------------------------------------------


def generate(*, request: dict[str, Any], user: User | None = None) -> Batch:
    """Validate `request` and write the batch with all its tasks queued, in one transaction.

    Nothing is sent to Ember here: the worker picks the tasks up.
    """
    plan = _validate(request)
    now = timezone.now()
    with transaction.atomic():
        batch = Batch.objects.create(title=plan["title"], request=plan["request"], created_by=user)
        Task.objects.bulk_create(
            Task(
                batch=batch,
                kind=Kind.CLIP if frame == "clip" else Kind.IMAGE,
                state=TaskState.QUEUED,
                phase="Waiting for the worker",
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
                next_attempt_at=now,
            )
            for provider in plan["providers"]
            for frame in plan["frames"]
            for ordinal in range(1, provider["candidates"] + 1)
        )
    return batch


def _validate(request: object) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise InvalidRequest("The request must be a JSON object.")
    prompt = request.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("The prompt must not be empty.")
    prompt = prompt.strip()
    if len(prompt) > MAX_PROMPT:
        raise InvalidRequest(f"The prompt is too long (at most {MAX_PROMPT} characters).")
    title = request.get("title") or prompt[:80]
    if not isinstance(title, str):
        raise InvalidRequest("The title must be text.")
    subjects = _subjects(request.get("subjects"))
    references = _references(request.get("references"), subjects)
    providers = _providers(request.get("providers"))
    frames = _frames(request.get("frames", ["image"]))
    total = sum(p["candidates"] for p in providers) * len(frames)
    if total > MAX_TASKS:
        raise InvalidRequest(f"This batch would make {total} tasks; the limit is {MAX_TASKS}.")
    subject_ids = [s.pk for s in subjects]
    return {
        "title": title.strip()[:200],
        "prompt": prompt,
        "subjects": subject_ids,
        "references": references,
        "providers": providers,
        "frames": frames,
        "request": {
            "title": title.strip()[:200],
            "prompt": prompt,
            "subjects": subject_ids,
            "references": [r["asset"] for r in references],
            "providers": [
                {"provider": p["provider"], "model": p["model"], "candidates": p["candidates"]}
                for p in providers
            ],
            "frames": frames,
        },
    }


MAX_ID = 2**63 - 1  # the largest row id any database here can hold


def _ids(value: object, what: str) -> list[int]:
    """Return the distinct ids in `value`: whole numbers or digit strings, nothing else."""
    if not isinstance(value, list):
        raise InvalidRequest(f"{what} must be a list of ids.")
    ids = []
    for item in value:
        if isinstance(item, str) and item.strip().isdigit():
            number = int(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            number = item
        else:
            raise InvalidRequest(f"{what} must be a list of ids; {item!r} is not one.")
        ids.append(number)
    return list(dict.fromkeys(ids))


def _existing(ids: list[int]) -> list[int]:
    """Drop ids no row can have, so the database is never asked about them."""
    return [i for i in ids if 0 < i <= MAX_ID]


def _subjects(value: object) -> list[Subject]:
    ids = _ids(value if value is not None else [], "Subjects")
    if not ids:
        raise InvalidRequest("Choose at least one subject.")
    found = {s.pk: s for s in Subject.objects.filter(pk__in=_existing(ids))}
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidRequest(f"Unknown subject: {missing[0]}.")
    return [found[i] for i in ids]


def _references(value: object, subjects: list[Subject]) -> list[dict[str, Any]]:
    uploaded = Asset.objects.filter(origin=Origin.UPLOADED)
    if value is None:
        assets = list(uploaded.filter(subjects__in=subjects).distinct().order_by("pk"))
    else:
        ids = _ids(value, "References")
        found = {a.pk: a for a in uploaded.filter(pk__in=_existing(ids))}
        missing = [i for i in ids if i not in found]
        if missing:
            raise InvalidRequest(f"Unknown reference photo: {missing[0]}.")
        assets = [found[i] for i in ids]
    # Frozen now: the worker re-hashes each file and refuses one that changed.
    return [
        {"asset": a.pk, "sha256": a.sha256, "name": a.file_name, "mime": a.mime} for a in assets
    ]


def _providers(value: object) -> list[dict[str, Any]]:
    catalogue = settings.AVATARS_PROVIDERS
    if not isinstance(value, list) or not value:
        raise InvalidRequest("Choose at least one provider.")
    providers: list[dict[str, Any]] = []
    for entry in value:
        if not isinstance(entry, dict):
            raise InvalidRequest("Each provider must be an object with a provider name.")
        name = entry.get("provider")
        if not isinstance(name, str) or name not in catalogue:
            raise InvalidRequest(f"Unknown provider: {name!r}.")
        candidates = entry.get("candidates", 1)
        if isinstance(candidates, bool) or not isinstance(candidates, int):
            raise InvalidRequest("Candidates must be a whole number.")
        if not 1 <= candidates <= MAX_CANDIDATES:
            raise InvalidRequest(f"Candidates must be between 1 and {MAX_CANDIDATES}.")
        model = entry.get("model") or catalogue[name].get("model") or ""
        if not isinstance(model, str):
            raise InvalidRequest("A provider's model must be text.")
        if any(p["provider"] == name and p["model"] == model for p in providers):
            raise InvalidRequest(f"Provider {name!r} is listed twice.")
        providers.append(
            {
                "provider": name,
                "label": catalogue[name]["label"],
                "model": model,
                "candidates": candidates,
            }
        )
    return providers


def _frames(value: object) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("Choose at least one frame.")
    for frame in value:
        if frame not in FRAMES:
            raise InvalidRequest(f"Unknown frame: {frame!r}. Frames are {', '.join(FRAMES)}.")
    return list(dict.fromkeys(value))


# --- cancel -----------------------------------------------------------------


def cancel_task(*, task: Task) -> Task:
    """Cancel a task that has sent nothing to Ember (under its current key), or raise TooLate.

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
        if task.state not in CANCELLABLE or task.attempt_under_key() is not None:
            raise TooLate(TOO_LATE)
        try:
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
            continue  # nothing to cancel, and no work with Ember to keep
        try:
            report.cancelled.append(cancel_task(task=task))
        except TooLate:
            report.kept.append(task)
    return report


# --- reconcile --------------------------------------------------------------


def reconcile(*, task: Task, client: EmberClient | None = None) -> Task:
    """Record what Ember's history says about a RECONCILABLE task and hand it back to the worker.

    Reconciliation never copies (the worker owns every copy) and never resubmits.
    """
    return async_to_sync(areconcile)(task=task, client=client)


async def areconcile(*, task: Task, client: EmberClient | None = None) -> Task:
    await sync_to_async(task.refresh_from_db)()
    if task.state not in RECONCILABLE:
        return task
    if task.state == TaskState.COPY_FAILED and task.result:
        return await sync_to_async(_back_to_copying)(task, task.result, task.ember_job_id)
    own_client = client is None
    client = client or EmberClient()
    try:
        rows = await client.history(str(task.pk))
    except EmberError as exc:
        return await sync_to_async(update)(
            task, expected=task.version, phase=f"Ember's history could not be read: {exc.message}"
        )
    finally:
        if own_client:
            await client.aclose()
    row = _pick_row(task, rows)
    if row is None:
        return await sync_to_async(update)(
            task,
            expected=task.version,
            phase="Ember's history has no row for this task yet",
        )
    return await sync_to_async(_back_to_copying)(task, row["result"], str(row.get("job_id") or ""))


def _pick_row(task: Task, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    usable = []
    for row in rows:
        try:
            check_result(row.get("result"))
        except EmberError:
            continue
        usable.append(row)
    if not usable:
        return None
    for row in usable:
        if task.ember_job_id and row.get("job_id") == task.ember_job_id:
            return row
    return usable[0]


def _back_to_copying(task: Task, result: dict[str, Any], job_id: str) -> Task:
    with transaction.atomic():
        if job_id and not task.ember_job_id:
            task.attempts.filter(ember_job_id="").update(ember_job_id=job_id)
        return move(
            task,
            TaskState.COPYING,
            expected=task.version,
            result=result,
            ember_job_id=job_id or task.ember_job_id,
            phase="Copying the original from Ember",
            error="",
        )


# --- resubmit (a person's decision) ------------------------------------------

RESUBMIT_WARNING = "Resubmitting may pay for a second generation: Ember may already have this job."
RESUBMIT_TOO_EARLY = (
    "Ember may still be working on the last submit. Wait until the poll bound has passed "
    "since it was sent, or confirm that you checked Ember and it did not receive this."
)


class ResubmitRefused(Exception):
    """The resubmit is not allowed (yet); the message says why."""


def resubmit(*, task: Task, confirmed_not_received: bool = False) -> Task:
    """Send an uncertain task again, as a new attempt: a person's explicit choice.

    Allowed once the worker's poll bound has passed since the last submit, or when
    the person confirms they checked Ember and it did not receive this.
    """
    task.refresh_from_db()
    if task.state != TaskState.UNCERTAIN:
        raise ResubmitRefused("Only an uncertain task can be resubmitted.")
    sent = task.submitted_at
    waited = (timezone.now() - sent).total_seconds() if sent else POLL_BOUND
    if waited < POLL_BOUND and not confirmed_not_received:
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


# --- publish ----------------------------------------------------------------


def publish(*, avatar_set: AvatarSet) -> AvatarSet:
    """Publish a set, refusing while any chosen generated image lacks its Ember history.

    Publishing again keeps the first publication time.
    """
    if avatar_set.published_at is not None:
        return avatar_set
    missing = avatar_set.assets.filter(origin=Origin.GENERATED, ember_history_id="").exists()
    if missing:
        raise PublishRefused()
    return update(avatar_set, published_at=timezone.now())
