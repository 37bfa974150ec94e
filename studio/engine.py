"""Services that touch several models, the store or Ember: generate, cancel, reconcile, publish.

Views, admin actions and commands call these; they never change task state themselves.
"""

import hashlib
import json
import re
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Count, Max, Q
from django.db.models.functions import Cast, Substr
from django.utils import timezone
from django.utils.text import slugify

from studio import ids as ids_module
from studio import metadata, originals
from studio.ember.client import EmberClient, EmberError, check_result, is_safe_id, shown_id
from studio.models import (
    CANCELLABLE,
    FINAL,
    RECONCILABLE,
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    BatchKey,
    Kind,
    Origin,
    SetItem,
    Subject,
    Task,
    TaskState,
    stored_facts,
)
from studio.store import Conflict, move, update

FRAMES = ("image", "headshot", "full-body", "clip")
MAX_CANDIDATES = 8  # per provider, however a request splits them over its models
MAX_PROMPT = 4000
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
TOO_LATE = "This task has already been sent to Ember; the work is kept."
ALREADY_ENDED = "This task has already ended; there is nothing to cancel."
RESUBMIT_WITHDRAWN = (
    "The resubmit was withdrawn before it was sent. An earlier attempt may still be with "
    "Ember: reconcile before retry."
)
SET_PUBLISHED = "This set is published; its choice can no longer change."
SET_KEPT_CHANGING = "This set kept changing while it was being published; publish it again."
PUBLISH_TRIES = 3  # checks of a set whose choice keeps changing under the publish
KEY_REUSED = "This key already planned a batch from a different request."
REFUSED_SHOWN = 3  # unsafe ids a reconcile names on the task; the rest are counted
SPEND_WINDOW_HOURS = 24  # the daily cap counts the tasks planned in this many hours


class InvalidRequest(ValueError):
    """A request that cannot be planned; the message says why, for people.

    `field` names the part of the request at fault ("providers" or "references"; empty
    for the request as a whole) and `provider` the provider, so that a form can show the
    message beside what caused it.
    """

    def __init__(self, message: str, *, field: str = "", provider: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.provider = provider


class SpendCapReached(InvalidRequest):
    """The batch would take its user past the daily cap on paid tasks; the numbers say how."""

    def __init__(self, *, planned: int, more: int, limit: int) -> None:
        super().__init__(
            f"You have planned {planned} paid tasks in the last {SPEND_WINDOW_HOURS} hours; "
            f"this batch would make {more} more and the daily limit is {limit}."
        )
        self.planned = planned
        self.more = more
        self.limit = limit


class KeyReused(Exception):
    """The idempotency key already planned a batch from another request: `batch`."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(KEY_REUSED)
        self.batch = batch


class TooLate(Exception):
    """The task already reached Ember (or finished): it cannot be cancelled."""


class PublishRefused(Exception):
    """The set cannot be published (yet); the message says why, for people."""

    def __init__(self, message: str = PUBLISH_REFUSED) -> None:
        super().__init__(message)


@dataclass
class BatchCancel:
    cancelled: list[Task] = field(default_factory=list)
    kept: list[Task] = field(default_factory=list)


# --- subjects, references, sets ------------------------------------------------


SLUG_TRIES = 3  # numbered slugs tried before a random suffix; a concurrent create costs one


def create_subject(*, name: str) -> Subject:
    """Create a subject with a unique slug derived from `name`."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidRequest("A subject needs a name.")
    if len(name) > 120:
        raise InvalidRequest("A subject's name must be at most 120 characters.")
    base = slugify(name)[:120] or "subject"
    for _ in range(SLUG_TRIES):
        subject = _create_subject_as(name=name, slug=_free_slug(base))
        if subject is not None:
            return subject
    # Concurrent requests keep taking the next number: a random suffix no other one computes.
    return Subject.objects.create(name=name, slug=f"{base}-{secrets.token_hex(4)}")


def _free_slug(base: str) -> str:
    """Return `base` if no subject has it, else `base-N` past the highest N taken, in one query.

    The range on `slug` lets its unique index find the `base-<digit>…` rows rather than
    probing one slug per query; the pattern then drops other names that merely start
    with a digit ("ada-1st"). Suffixes of ten digits or more (or with a leading zero)
    are other names, and keep the cast within any database's integer.
    """
    numbered = Q(
        slug__gte=f"{base}-1",
        slug__lt=f"{base}-:",  # ":" follows "9" in ASCII
        slug__regex=rf"^{re.escape(base)}-[1-9][0-9]{{0,8}}$",
    )
    suffix = Cast(Substr("slug", len(base) + 2), BigIntegerField())
    taken = Subject.objects.filter(Q(slug=base) | numbered).aggregate(
        bare=Count("pk", filter=Q(slug=base)), highest=Max(suffix, filter=~Q(slug=base))
    )
    if not taken["bare"]:
        return base
    return f"{base}-{(taken['highest'] or 1) + 1}"


def _create_subject_as(*, name: str, slug: str) -> Subject | None:
    """Create the subject under `slug`, or return None if another request just took it."""
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves the outer transaction usable
            return Subject.objects.create(name=name, slug=slug)
    except IntegrityError:
        return None


def add_reference(*, subject: Subject, data: bytes, file_name: str) -> Asset:
    """Store an uploaded reference photo for `subject` (raises originals.NotAnImage).

    The same photo uploaded twice is one reference: the existing upload gains the
    subject. Bytes that only a generated asset has so far become a new reference row
    (sharing the file); the generated row is left as it is.
    """
    # Location data never reaches the store, the studio's pages or Ember (lossless).
    original = originals.save(metadata.strip_location(data))
    with transaction.atomic():
        asset, _created = Asset.objects.get_or_create(
            sha256=original.sha256,
            origin=Origin.UPLOADED,
            defaults={
                **stored_facts(original),
                "file_name": (file_name or f"reference{original.info.extension}")[:255],
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
    """Replace the set's choice with `asset_ids`, in that order, while the set is a draft.

    The write is versioned against the row that was seen to be a draft: a publish
    that lands in between moves the version, and the choice is then judged again.
    """
    ids = _ids(asset_ids, "Assets")
    found = set(Asset.objects.filter(pk__in=_existing(ids)).values_list("pk", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidRequest(f"Unknown asset: {missing[0]}.")
    while True:
        if avatar_set.published_at is not None:
            raise InvalidRequest(SET_PUBLISHED)
        try:
            with transaction.atomic():
                # Claim the version first: a publish's own versioned write cannot land
                # until this transaction ends, and then finds the version moved.
                update(avatar_set, expected=avatar_set.version)
                avatar_set.items.all().delete()
                SetItem.objects.bulk_create(
                    SetItem(avatar_set=avatar_set, asset_id=asset_id, position=position)
                    for position, asset_id in enumerate(ids)
                )
            return avatar_set
        except Conflict:
            # Another choice (whose order this one replaces whole) or a publish.
            avatar_set.refresh_from_db(fields=["version", "published_at"])


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


def generate(*, request: dict[str, Any], user: User | None = None, key: str = "") -> Batch:
    """Validate `request` and write the batch with all its tasks queued, in one transaction.

    With `key` (one of `user`'s idempotency keys), the same key with the same request
    within `BatchKey.LIFETIME` returns the batch the first one planned and plans
    nothing; the same key with another request raises KeyReused. A request past a cap
    raises InvalidRequest; past `user`'s daily cap, SpendCapReached. Nothing is sent to
    Ember here: the worker picks the tasks up.
    """
    if key:
        if user is None:
            raise ValueError("An idempotency key belongs to a user.")
        return _generate_once(request=request, user=user, key=key)
    plan = _validate(request)
    with transaction.atomic():
        return _write_plan(plan, user)


def _generate_once(*, request: dict[str, Any], user: User, key: str) -> Batch:
    """Plan `request` unless `key` already did; the plan and the key commit together."""
    body_sha256 = canonical_sha256(request)
    first = _keyed_batch(user=user, key=key, body_sha256=body_sha256)
    if first is not None:
        return first
    plan = _validate(request)
    try:
        with transaction.atomic():
            batch = _write_plan(plan, user)
            _record_key(user=user, key=key, body_sha256=body_sha256, batch=batch)
    except IntegrityError:
        # A concurrent request with this key committed first (the key is unique per
        # user): this transaction planned nothing, and the first batch stands.
        first = _keyed_batch(user=user, key=key, body_sha256=body_sha256)
        if first is None:
            raise
        return first
    return batch


def canonical_sha256(request: object) -> str:
    """Hash `request` as canonical JSON: the same fields and values hash alike in any order."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _keyed_batch(*, user: User, key: str, body_sha256: str) -> Batch | None:
    """Return the batch `key` planned within its lifetime, or None; KeyReused for another body."""
    row = (
        BatchKey.objects.select_related("batch")
        .filter(user=user, key=key, created_at__gt=timezone.now() - BatchKey.LIFETIME)
        .first()
    )
    if row is None:
        return None
    if row.body_sha256 != body_sha256:
        raise KeyReused(row.batch)
    return row.batch


def _record_key(*, user: User, key: str, body_sha256: str, batch: Batch) -> None:
    now = timezone.now()
    # Forget the user's expired keys first: an expired row would block this one.
    BatchKey.objects.filter(user=user, created_at__lte=now - BatchKey.LIFETIME).delete()
    BatchKey.objects.create(
        user=user, key=key, body_sha256=body_sha256, batch=batch, created_at=now
    )


def _write_plan(plan: dict[str, Any], user: User | None) -> Batch:
    """Write the planned batch and its tasks; call inside the transaction that commits them.

    The daily cap is counted in the same transaction as the insert, so that two
    concurrent plans of one user cannot both fit under it.
    """
    if user is not None:
        _check_daily_cap(user, plan["tasks"])
    now = timezone.now()
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


def _check_daily_cap(user: User, more: int) -> None:
    """Raise SpendCapReached if `more` tasks would take `user` past the daily cap.

    Every task planned counts, whatever became of it since: a cancelled one was not
    paid for, but counting what was planned keeps the cap simple to state and check.
    """
    limit = settings.AVATARS_DAILY_TASK_CAP
    if not limit:
        return
    # Serialise this user's plans until the transaction ends: on PostgreSQL the row lock
    # on the user; SQLite's IMMEDIATE transactions already hold the database's write lock.
    list(User.objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
    planned = _tasks_planned_since(user, timezone.now() - timedelta(hours=SPEND_WINDOW_HOURS))
    if planned + more > limit:
        raise SpendCapReached(planned=planned, more=more, limit=limit)


def _tasks_planned_since(user: User, since: datetime) -> int:
    """Count the tasks of `user`'s batches planned after `since`, whatever their state."""
    return Task.objects.filter(batch__created_by=user, created_at__gt=since).count()


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
    limit = settings.AVATARS_MAX_TASKS_PER_BATCH
    if total > limit:
        raise InvalidRequest(
            f"This batch would make {total} tasks; the limit is {limit}.", field="providers"
        )
    subject_ids = [s.pk for s in subjects]
    return {
        "title": title.strip()[:200],
        "prompt": prompt,
        "subjects": subject_ids,
        "references": references,
        "providers": providers,
        "frames": frames,
        "tasks": total,
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


def _ids(value: object, what: str) -> list[int]:
    """Return the distinct ids in `value`: whole numbers or ASCII digit strings, nothing else.

    An id no row can have (0, or past the database's range) is kept, so that the caller
    answers "Unknown ..." for it; only `_existing` ids are ever put to the database.
    """
    if not isinstance(value, list):
        raise InvalidRequest(f"{what} must be a list of ids.")
    ids = []
    for item in value:
        if not ids_module.looks_like_id(item):
            raise InvalidRequest(f"{what} must be a list of ids; {item!r} is not one.")
        ids.append(int(item))
    return list(dict.fromkeys(ids))


def _existing(ids: list[int]) -> list[int]:
    """Drop ids no row can have, so the database is never asked about them."""
    return [i for i in ids if ids_module.row_id(i) is not None]


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
    _check_reference_caps(assets, every_photo=value is None)
    # Frozen now: the worker re-hashes each file and refuses one that changed.
    return [
        {"asset": a.pk, "sha256": a.sha256, "name": a.file_name, "mime": a.mime} for a in assets
    ]


def _check_reference_caps(assets: list[Asset], *, every_photo: bool) -> None:
    """Refuse more photos, or more bytes of them, than every task of the batch may send."""
    limit = settings.AVATARS_MAX_REFERENCES
    if len(assets) > limit:
        which = " (every photo of its subjects)" if every_photo else ""
        raise InvalidRequest(
            f"This batch would send {len(assets)} reference photos{which}; the limit is {limit}.",
            field="references",
        )
    total, most = sum(a.size for a in assets), settings.AVATARS_MAX_REFERENCE_BYTES
    if total > most:
        raise InvalidRequest(
            f"The reference photos come to {_bytes(total)}; the limit is {_bytes(most)}.",
            field="references",
        )


def _bytes(size: int) -> str:
    """Say `size` exactly, with mebibytes beside it once it is that large."""
    mib = 1024 * 1024
    return f"{size:,} bytes" + (f" ({size / mib:.1f} MiB)" if size >= mib else "")


def _providers(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest("Choose at least one provider.")
    providers: list[dict[str, Any]] = []
    for entry in value:
        provider = _provider(entry)
        name, model = provider["provider"], provider["model"]
        if any(p["provider"] == name and p["model"] == model for p in providers):
            raise InvalidRequest(f"Provider {name!r} is listed twice.")
        providers.append(provider)
    # Rows of one provider split by model still spend that provider's candidates.
    for name in dict.fromkeys(p["provider"] for p in providers):
        count = sum(p["candidates"] for p in providers if p["provider"] == name)
        if count > MAX_CANDIDATES:
            raise InvalidRequest(
                f"Provider {name!r} has {count} candidates across its rows; "
                f"the limit is {MAX_CANDIDATES} per provider.",
                field="providers",
                provider=name,
            )
    return providers


def _provider(entry: object) -> dict[str, Any]:
    """Read one row of `providers`: a provider of the catalogue, one of its models, candidates."""
    catalogue = settings.AVATARS_PROVIDERS
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
    default = catalogue[name].get("model") or ""
    model = entry.get("model") or default
    if not isinstance(model, str):
        raise InvalidRequest("A provider's model must be text.")
    models = _provider_models(name)
    if model and model not in models:
        known = ", ".join(models) or "none"
        raise InvalidRequest(
            f"Unknown model for provider {name!r}: {model!r}. Its models are {known}.",
            field="providers",
            provider=name,
        )
    return {
        "provider": name,
        "label": catalogue[name]["label"],
        "model": model,
        "candidates": candidates,
    }


def _provider_models(name: str) -> list[str]:
    """Return the models a batch may name for provider `name`: its default model first."""
    entry = settings.AVATARS_PROVIDERS[name]
    models = [entry.get("model") or "", *entry.get("models", [])]
    return [m for m in dict.fromkeys(models) if m]


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

    A resubmitted task that is not sent yet is not cancelled but put back to `uncertain`
    (its earlier attempt may be a paid original in Ember that reconciling collects).

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
            if task.attempts.exists():
                # A resubmitted task: an earlier attempt may be a paid original in Ember,
                # which only reconciling can collect. A cancelled task is never looked at
                # again, so cancelling withdraws the resubmit and nothing more.
                return move(
                    task,
                    TaskState.UNCERTAIN,
                    expected=task.version,
                    phase="Resubmit withdrawn; reconcile before retry",
                    error=RESUBMIT_WITHDRAWN,
                )
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
            done = cancel_task(task=task)
        except TooLate:
            report.kept.append(task)
        else:
            # A withdrawn resubmit keeps its earlier attempt, which may be with Ember.
            (report.cancelled if done.state == TaskState.CANCELLED else report.kept).append(done)
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
    return await sync_to_async(_record_history)(task, rows)


def _record_history(task: Task, rows: list[dict[str, Any]]) -> Task:
    """Adopt the task's own row from Ember's history, or say what the history holds instead.

    Every other row is another paid original of this task (a submit whose answer
    was lost, or an earlier attempt): it is shown on the task and recorded on the
    attempt that sent it, but never copied, released or taken as this task's.
    """
    usable = [row for row in rows if _usable(row)]
    refused = _refused_note(rows)
    with transaction.atomic():
        _learn_attempts(task, usable)
        own = _pick_row(task, usable)
        others = [row for row in usable if row is not own]
        note = " ".join(filter(None, [_others_note(others), refused]))
        if own is not None:
            job_id = own.get("job_id") or ""
            return _back_to_copying(task, _adopted(own), job_id, note=note)
        noted = {"error": note} if note else {}
        return update(task, expected=task.version, phase=_no_row_phase(task, usable), **noted)


def _usable(row: dict[str, Any]) -> bool:
    """Say whether a history row has a succeeded job's answer about one image."""
    try:
        check_result(row.get("result"))
    except EmberError:
        return False
    job_id, image_id = row.get("job_id"), row.get("image_id")
    if not isinstance(job_id, str | None) or not isinstance(image_id, str | None):
        return False
    if _unsafe_ids(row):
        return False  # its job or image could not be asked about without leaving its route
    # A row naming two images cannot say which one it is about.
    return not image_id or image_id == row["result"]["image"]["id"]


def _unsafe_ids(row: dict[str, Any]) -> list[str]:
    """Return the ids a history row names that Avatars will not put in a URL, shown escaped."""
    result = row.get("result")
    image = result.get("image") if isinstance(result, dict) else None
    named = [row.get("job_id"), row.get("image_id")]
    named.append(image.get("id") if isinstance(image, dict) else None)
    unsafe = [shown_id(v) for v in named if isinstance(v, str) and v and not is_safe_id(v)]
    return list(dict.fromkeys(unsafe))


def _refused_note(rows: list[dict[str, Any]]) -> str:
    """Say, for people, which history rows were not taken because of the ids they name."""
    unsafe = list(dict.fromkeys(shown for row in rows for shown in _unsafe_ids(row)))
    if not unsafe:
        return ""
    named = ", ".join(unsafe[:REFUSED_SHOWN])
    if len(unsafe) > REFUSED_SHOWN:
        named += f" and {len(unsafe) - REFUSED_SHOWN} more"
    return (
        f"Ember's history names {named}: ids Avatars will not put in a URL. "
        "Those rows were not taken; nothing was fetched or released for them."
    )


def _row_image(row: dict[str, Any]) -> str:
    return str(row.get("image_id") or row["result"]["image"]["id"])


def _pick_row(task: Task, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Return the task's own row among `rows`, or None.

    Once the task has an original, its own row is the one about that image: a row
    of another attempt must never lend it a history id. Before that, the row of the
    task's job; and when the last submit's answer was lost (no job id), the one row
    that no other attempt of the task has recorded, if there is exactly one.
    """
    if task.asset_id is not None:
        image_id = Asset.objects.filter(pk=task.asset_id).values_list("ember_image_id", flat=True)
        own_image = image_id.first()
        return next((r for r in rows if own_image and _row_image(r) == own_image), None)
    if task.ember_job_id:
        return next((r for r in rows if r.get("job_id") == task.ember_job_id), None)
    candidates = _unclaimed(task, rows)
    return candidates[0] if len(candidates) == 1 else None


def _unclaimed(task: Task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the rows whose job no attempt but the task's latest has recorded."""
    jobs = list(task.attempts.order_by("number").values_list("ember_job_id", flat=True))
    claimed = {job for job in jobs[:-1] if job}
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
        seen = f"Ember's history shows it arrived: job {job_id}, image {_row_image(row)}."
        update(attempt, ember_job_id=job_id, error=f"{attempt.error} {seen}".strip())
        known.add(job_id)
        del lost[attempt.number]


def _adopted(row: dict[str, Any]) -> dict[str, Any]:
    """Return the row's answer with the history id taken from the row itself.

    A repaired row has its own `id` while the answer nested in it may still say
    `history: null`; finish() reads the id from the saved answer.
    """
    result = dict(row["result"])
    own_id = row.get("id")
    history_id = own_id if isinstance(own_id, str) and own_id else None
    history_id = history_id or (result.get("history") or {}).get("id")
    if history_id:
        result["history"], result["history_error"] = {"id": history_id}, None
    return result


def _others_note(others: list[dict[str, Any]]) -> str:
    """Describe, for people, paid originals of this task that Avatars did not take."""
    if not others:
        return ""
    if len(others) == 1:
        row = others[0]
        return (
            "Ember's history also holds another paid original of this task, still protected "
            f"in Ember: job {row.get('job_id') or '?'}, image {_row_image(row)}. "
            "Avatars did not copy it and does not release it."
        )
    listed = ", ".join(f"job {r.get('job_id') or '?'} (image {_row_image(r)})" for r in others)
    return (
        f"Ember's history also holds {len(others)} other paid originals of this task, still "
        f"protected in Ember: {listed}. Avatars did not copy them and does not release them."
    )


def _no_row_phase(task: Task, rows: list[dict[str, Any]]) -> str:
    if task.asset_id is not None:
        return "Ember's history has no row for this task's image yet"
    if not task.ember_job_id and len(_unclaimed(task, rows)) > 1:
        return "Ember's history has several rows this submit could be; none was taken"
    return "Ember's history has no row for this task yet"


def _back_to_copying(task: Task, result: dict[str, Any], job_id: str, *, note: str = "") -> Task:
    with transaction.atomic():
        latest = task.attempts.order_by("-number").first()
        if job_id and not task.ember_job_id and latest is not None and not latest.ember_job_id:
            # The lost answer of the task's latest submit: this is its job.
            update(latest, ember_job_id=job_id)
        return move(
            task,
            TaskState.COPYING,
            expected=task.version,
            result=result,
            # A job id the task already has is never replaced by another row's.
            ember_job_id=task.ember_job_id or job_id,
            phase="Copying the original from Ember",
            error=note,
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


# --- publish ----------------------------------------------------------------


def publish(*, avatar_set: AvatarSet) -> AvatarSet:
    """Publish a set, refusing while any chosen generated image lacks its Ember history.

    The check and the write are about one version of the set: the write is versioned,
    so a choice that changes in between makes this publish look again, never publish
    unchecked. Publishing again keeps the first publication time.
    """
    for _ in range(PUBLISH_TRIES):
        if avatar_set.published_at is not None:
            return avatar_set
        with transaction.atomic():
            chosen = avatar_set.assets.filter(origin=Origin.GENERATED)
            if chosen.filter(ember_history_id="").exists():
                raise PublishRefused()
            try:
                return update(avatar_set, expected=avatar_set.version, published_at=timezone.now())
            except Conflict:
                pass  # nothing was written; the choice moved since it was read
        avatar_set.refresh_from_db(fields=["version", "published_at"])
    raise PublishRefused(SET_KEPT_CHANGING)
