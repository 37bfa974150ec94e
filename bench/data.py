"""Data the benchmarks build inside their child processes: schema, subjects, history, requests.

History is written with `bulk_create` (it is set-up, never timed): finished
batches of 200 tasks, each done task with its generated asset when asked. The
assets' originals do not exist on disk; nothing measured here reads them.
"""

import asyncio
import hashlib
import io
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from PIL import Image, ImageDraw

from studio import engine
from studio.models import Asset, Attempt, Batch, Origin, Subject, Task, TaskState
from studio.worker.loop import tune_interpreter

BATCH_TASKS = 200  # tasks per history batch, the most one request may plan
CHUNK = 10_000  # rows held in memory at once while writing history
PROMPT = "a friendly family portrait, soft watercolour, warm light"
# 200 image tasks take 25 providers of 8 candidates; the default catalogue has 3. The
# benchmarks plan against a catalogue of their own (the simulator takes any provider).
PROVIDERS = {
    f"bench-{i:02d}": {"label": f"Bench {i}", "model": f"bench-model-{i}"} for i in range(25)
}


def migrate() -> None:
    call_command("migrate", verbosity=0, interactive=False)


def reference_png(seed: int = 0) -> bytes:
    """Return a small, real PNG (a reference photo the worker will re-hash and send)."""
    image = Image.new("RGB", (96, 96), (40 + seed % 200, 120, 180))
    ImageDraw.Draw(image).ellipse((24, 16, 72, 72), fill=(230, 190, 160))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def subject_with_reference(name: str = "Ada") -> Subject:
    subject = engine.create_subject(name=name)
    engine.add_reference(subject=subject, data=reference_png(), file_name=f"{subject.slug}.png")
    return subject


def request_for(size: int, subject: Subject, *, title: str = "bench") -> dict[str, Any]:
    """Return a generate() request that plans exactly `size` image tasks (at most 200).

    A request holds at most 8 candidates per provider, so larger batches name several
    providers of the benchmarks' own catalogue, which this installs in the process.
    """
    if not 1 <= size <= settings.AVATARS_MAX_TASKS_PER_BATCH:
        limit = settings.AVATARS_MAX_TASKS_PER_BATCH
        raise ValueError(f"a batch holds 1 to {limit} tasks, not {size}")
    settings.AVATARS_PROVIDERS = PROVIDERS
    providers: list[dict[str, Any]] = []
    left = size
    names = list(PROVIDERS)
    while left:
        candidates = min(engine.MAX_CANDIDATES, left)
        providers.append({"provider": names[len(providers)], "candidates": candidates})
        left -= candidates
    return {
        "title": title,
        "prompt": PROMPT,
        "subjects": [subject.pk],
        "providers": providers,
        "frames": ["image"],
    }


def plan(tasks: int, subject: Subject) -> list[Batch]:
    """Plan `tasks` image tasks through the real `generate()`, in batches of at most 200."""
    batches = []
    left = tasks
    while left:
        size = min(settings.AVATARS_MAX_TASKS_PER_BATCH, left)
        batches.append(engine.generate(request=request_for(size, subject)))
        left -= size
    return batches


def run_once(worker: Any) -> None:
    """Drive what is due to a resting point holding the worker's locks, as `run_worker` does."""
    worker.lock()
    tune_interpreter()
    try:
        asyncio.run(worker.run(once=True))
    finally:
        worker.unlock()


def add_history(count: int, subject: Subject, *, assets: bool, attempts: bool = False) -> None:
    """Write `count` finished tasks in batches of 200 (with their assets and attempts if asked).

    Most end `done`, some `failed` or `cancelled`; all have `next_attempt_at` unset,
    as every task outside ACTIVE does. Dates are spread over the past year.
    """
    reference = Asset.objects.filter(origin=Origin.UPLOADED).values("pk", "sha256").first()
    frozen = [
        {
            "asset": reference["pk"],
            "sha256": reference["sha256"],
            "name": "ref.png",
            "mime": "image/png",
        }
        if reference
        else {}
    ]
    next_asset = (Asset.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
    now = timezone.now()
    written = 0
    while written < count:
        size = min(CHUNK, count - written)
        batches: list[Batch] = []
        tasks: list[Task] = []
        rows: list[Asset] = []
        paid: list[Attempt] = []
        for n in range(written, written + size):
            if n % BATCH_TASKS == 0 or not batches:
                batches.append(
                    Batch(title=f"history {n // BATCH_TASKS}", request={"prompt": PROMPT})
                )
            when = now - timedelta(minutes=(count - n) * 3)
            task = _finished_task(n, batches[-1], subject, frozen, when)
            if assets and task.result is not None:
                # Explicit ids let task and asset point at each other in one insert each;
                # SQLite checks the foreign keys at commit.
                task.asset_id = next_asset
                rows.append(_generated_asset(next_asset, task, frozen))
                next_asset += 1
            if attempts and task.submitted_at is not None:
                paid.append(_paid_attempt(task, when))
            tasks.append(task)
        with transaction.atomic():
            Batch.objects.bulk_create(batches)
            Task.objects.bulk_create(tasks)
            Asset.objects.bulk_create(rows)
            Attempt.objects.bulk_create(paid)
        written += size


def _finished_task(
    n: int, batch: Batch, subject: Subject, frozen: list[dict[str, Any]], when: datetime
) -> Task:
    """Return the `n`th task of the history, ended as `_state(n)` says, unsaved."""
    state = _state(n)
    digest = hashlib.sha256(f"bench-{uuid.uuid4()}".encode()).hexdigest()
    result = _result(digest) if state == TaskState.DONE else None
    sent = state != TaskState.CANCELLED
    return Task(
        batch=batch,
        state=state,
        phase="Complete" if state == TaskState.DONE else "Ended",
        provider="openai",
        provider_label="GPT Image",
        model="gpt-image-1",
        frame="image",
        ordinal=n % BATCH_TASKS + 1,
        prompt=PROMPT,
        subjects=[subject.pk],
        references=frozen,
        ember_job_id=f"job_{digest[:32]}" if sent else "",
        result=result,
        protection_released=True if result else None,
        submitted_at=when if sent else None,
        next_attempt_at=None,
    )


def _generated_asset(pk: int, task: Task, frozen: list[dict[str, Any]]) -> Asset:
    """Return the asset row a done task's copy would have written (its file is not made)."""
    result = task.result or {}
    return Asset(
        pk=pk,
        sha256=result["image"]["sha256"],
        file_name=f"openai-image-{task.ordinal}.png",
        mime="image/png",
        width=512,
        height=512,
        size=15_000,
        label=f"GPT Image · image #{task.ordinal}",
        origin=Origin.GENERATED,
        references=[frozen[0].get("asset")],
        task=task,
        batch=task.batch,
        workflow="exploration",
        ember_image_id=result["image"]["id"],
        ember_history_id=result["history"]["id"],
        provider="openai",
        model="gpt-image-1",
        prompt=PROMPT,
        upstream=result,
    )


def _paid_attempt(task: Task, when: datetime) -> Attempt:
    return Attempt(
        task=task,
        number=1,
        ember_job_id=task.ember_job_id,
        submitted_at=when,
        answered_at=when,
        outcome=Attempt.Outcome.ACCEPTED,
    )


def _state(n: int) -> TaskState:
    if n % 50 == 7:
        return TaskState.FAILED
    if n % 50 == 13:
        return TaskState.CANCELLED
    return TaskState.DONE


def _result(digest: str) -> dict[str, Any]:
    return {
        "image": {
            "id": f"img_{digest[:32]}",
            "mime": "image/png",
            "sha256": digest,
            "bytes": 15_000,
            "metadata": {"provider": "openai", "model": "gpt-image-1", "width": 512, "height": 512},
        },
        "history": {"id": f"hist_{digest[32:]}"},
        "history_error": None,
    }
