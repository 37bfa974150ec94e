"""The builders the tests share: images, requests, batches, assets, Ember's answers.

Plain functions (fixtures live in conftest.py), so a test, a helper module or a snippet
run in another process imports them the same way: `from tests.factories import png_bytes`.
"""

import hashlib
import io
import itertools
import random
from datetime import timedelta
from typing import Any

import respx
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.utils import timezone
from PIL import Image

from studio import engine, originals
from studio.models import (
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    Origin,
    SetItem,
    Subject,
    Task,
    TaskState,
)
from studio.store import move
from studio.worker import Worker

EMBER = "http://ember.test"
HISTORY = "/api/v1/history"
RECONCILE_PHASE = "Reconcile before retry"
MAY_HAVE_REACHED = (
    "The previous submit may have reached Ember. Check history before submitting again."
)


def png_bytes(seed: int = 0, size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    """Return a small, real image whose bytes differ by seed."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    for _ in range(20):
        img.putpixel((rng.randrange(size[0]), rng.randrange(size[1])), (rng.randrange(256),) * 3)
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


def drain(worker: Worker) -> None:
    """Run the worker until nothing is due or in hand (`run_worker --once`), as the owner."""
    worker.lock()
    try:
        async_to_sync(worker.run)(once=True)
    finally:
        worker.unlock()


# --- batches and tasks ------------------------------------------------------------------


def batch_request(subject: Subject, **overrides: Any) -> dict[str, Any]:
    """Return the body a person's form or script sends to plan a batch for `subject`."""
    request: dict[str, Any] = {
        "title": "Spring avatars",
        "prompt": "a friendly portrait, watercolour",
        "subjects": [subject.pk],
        "providers": [{"provider": "openai", "candidates": 1}],
        "frames": ["image"],
    }
    request.update(overrides)
    return request


def a_batch(
    subject: Subject,
    *,
    candidates: int = 1,
    frames: tuple[str, ...] = ("image",),
    providers: tuple[str, ...] = ("openai",),
    user: User | None = None,
    **overrides: Any,
) -> Batch:
    """Plan a batch the way a person plans one: `candidates` of each provider, each frame.

    With `user`, the batch is that person's (and counts against their daily cap).
    """
    request = batch_request(
        subject,
        frames=list(frames),
        providers=[{"provider": name, "candidates": candidates} for name in providers],
        **overrides,
    )
    return engine.generate(request=request, user=user)


def plan(subject: Subject, **knobs: Any) -> list[Task]:
    """Plan a batch (see `a_batch`) and return its queued tasks in their order."""
    return list(a_batch(subject, **knobs).tasks.all())


def a_task(subject: Subject, **knobs: Any) -> Task:
    """Plan a batch of one task (see `a_batch`) and return that task."""
    return a_batch(subject, **knobs).tasks.get()


def sent_once_under_its_key(task: Task) -> Attempt:
    """Record a clip's first send under its key, whose answer was lost."""
    return Attempt.objects.create(
        task=task,
        number=1,
        idempotency_key=task.idempotency_key,
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.UNKNOWN,
    )


def a_clip_sent_once(subject: Subject) -> Task:
    """A queued clip whose first send's answer was lost: Ember may have it under its key."""
    task = a_task(subject, frames=("clip",))
    sent_once_under_its_key(task)
    return move(
        task, TaskState.QUEUED, phase="Ember's answer was lost; re-sending under the same key"
    )


def uncertain(task: Task, *, sent_ago: timedelta = timedelta(minutes=1)) -> Task:
    """Leave `task` as a worker that died mid-submit does: one attempt whose answer was lost."""
    sent = timezone.now() - sent_ago
    Attempt.objects.create(task=task, number=1, submitted_at=sent, outcome=Attempt.Outcome.UNKNOWN)
    return move(
        task,
        TaskState.UNCERTAIN,
        submitted_at=sent,
        phase=RECONCILE_PHASE,
        error=MAY_HAVE_REACHED,
    )


# --- assets and sets --------------------------------------------------------------------

_shas = (hashlib.sha256(f"generated {i}".encode()).hexdigest() for i in itertools.count())


def generated_asset(*, history_id: str = "", task: Task | None = None, **fields: Any) -> Asset:
    """An Ember result's asset row (its file need not exist), history id optional."""
    return Asset.objects.create(
        sha256=next(_shas),
        file_name="candidate.png",
        mime="image/png",
        width=1024,
        height=1024,
        size=1000,
        origin=Origin.GENERATED,
        ember_history_id=history_id,
        task=task,
        batch=task.batch if task else None,
        **fields,
    )


def stored_asset(
    seed: int = 1,
    *,
    data: bytes | None = None,
    origin: Origin = Origin.GENERATED,
    subject: Subject | None = None,
    task: Task | None = None,
    history_id: str | None = None,
    **fields: Any,
) -> Asset:
    """Store an original and its asset row, as an upload or the worker's copy leaves them.

    The bytes are `png_bytes(seed)` unless `data` is given. A reference photo is
    `subject`'s. A generated image carries Ember's ids for the seed (`img_<seed>`,
    `hist_<seed>`; `history_id=""` when Ember's history write failed) and the answer
    they came in; with `task`, it is that task's and its batch's.
    """
    original = originals.save(png_bytes(seed) if data is None else data)
    stem = subject.slug if subject else f"asset-{seed}"
    fields.setdefault("file_name", f"{stem}{original.info.extension}")
    if origin == Origin.GENERATED:
        image_id = fields.setdefault("ember_image_id", f"img_{seed}")
        history = f"hist_{seed}" if history_id is None else history_id
        fields.setdefault("upstream", ember_result(image_id, history or None))
        fields["ember_history_id"] = history
    if task is not None:
        fields.setdefault("batch", task.batch)
    asset = Asset.objects.create_stored(original, origin=origin, task=task, **fields)
    if subject is not None:
        asset.subjects.add(subject)
    return asset


_seeds = itertools.count(10_000)


def kept_image(*, history_id: str = "", **fields: Any) -> Asset:
    """A generated image whose original is in the store, as a published set's must be."""
    return stored_asset(next(_seeds), history_id=history_id, **fields)


def a_set(*assets: Asset, name: str = "Family 2026") -> AvatarSet:
    """A set holding `assets` in order."""
    chosen = AvatarSet.objects.create(name=name)
    for position, asset in enumerate(assets):
        SetItem.objects.create(avatar_set=chosen, asset=asset, position=position)
    return chosen


# --- Ember's answers (docs/ember.md) ----------------------------------------------------


def ember_result(
    image_id: str = "img_1",
    history_id: str | None = "hist_1",
    *,
    data: bytes | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return Ember's answer for a succeeded job: its image, and its history row or why not.

    With `data`, the image's hash and size are those bytes'; without, made-up ones.
    """
    return {
        "image": {
            "id": image_id,
            "mime": "image/png",
            "sha256": hashlib.sha256(data).hexdigest() if data is not None else "ab" * 32,
            "bytes": len(data) if data is not None else 123,
            "metadata": metadata
            or {"provider": "openai", "model": "gpt-image-1", "width": 64, "height": 48},
        },
        "history": {"id": history_id} if history_id else None,
        "history_error": None if history_id else "history write failed",
    }


def history_row(
    task: Task, job_id: str = "job_7", image_id: str = "img_7", history_id: str = "hist_7"
) -> dict[str, Any]:
    """Return the row Ember's history keeps of one of `task`'s jobs."""
    return {
        "id": history_id,
        "job_id": job_id,
        "image_id": image_id,
        "created_at": "2026-01-01T00:00:00Z",
        "source_metadata": {"source_app": "cwkAvatars", "task_id": str(task.pk)},
        "result": ember_result(image_id, history_id),
    }


def history_route(
    ember: respx.Router, task: Task, rows: list[dict[str, Any]] | None = None
) -> respx.Route:
    """Answer Ember's history lookup for `task` with `rows` (by default, one row)."""
    params = {"source_app": "cwkAvatars", "task_id": str(task.pk)}
    items = [history_row(task)] if rows is None else rows
    return ember.get(HISTORY, params=params).respond(200, json={"items": items})


def resubmitted_and_done(subject: Subject) -> Task:
    """A task whose first send's answer was lost, resubmitted by a person and done since:
    its second attempt's job made the original the archive holds (image img_1)."""
    task = uncertain(a_task(subject))
    Attempt.objects.create(
        task=task,
        number=2,
        submitted_at=task.submitted_at,
        ember_job_id="job_2",
        outcome=Attempt.Outcome.ACCEPTED,
    )
    task = move(task, TaskState.RUNNING, ember_job_id="job_2", phase="Ember is generating")
    asset = stored_asset(1, task=task)
    return move(task, TaskState.DONE, asset=asset, phase="Complete", error="")


def lost_send_rows(task: Task) -> list[dict[str, Any]]:
    """Ember's history of the task: the lost first send's row, and the resubmit's own."""
    first = history_row(task, job_id="job_1", image_id="img_9", history_id="hist_9")
    first["source_metadata"]["attempt"] = 1
    own = history_row(task, job_id="job_2", image_id="img_1", history_id="hist_1")
    own["source_metadata"]["attempt"] = 2
    return [first, own]
