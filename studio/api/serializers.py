"""The JSON shapes of docs/api.md. Ids are strings; times are ISO 8601 in UTC."""

from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone

from studio import engine
from studio.models import Asset, AvatarSet, Batch, Subject, Task


def subject_json(subject: Subject) -> dict[str, Any]:
    return {"id": str(subject.pk), "name": subject.name, "slug": subject.slug}


def task_json(task: Task, *, attempts: int | None = None) -> dict[str, Any]:
    """Describe `task`; pass `attempts` when already counted, to spare a query per task."""
    if attempts is None:
        attempts = task.attempts.count()
    return {
        "id": str(task.pk),
        "batch": str(task.batch_id),
        "kind": task.kind,
        "state": task.state,
        "phase": task.phase,
        "error": task.error,
        "provider": task.provider,
        "provider_label": task.provider_label,
        "model": task.model,
        "frame": task.frame,
        "ordinal": task.ordinal,
        "ember_job_id": task.ember_job_id,
        "attempts": attempts,
        "protection_released": task.protection_released,
        "asset": _id_or_none(task.asset_id),
        "retry_at": _time(engine.retry_at(task, timezone.now())),
    }


def batch_json(batch: Batch) -> dict[str, Any]:
    """Describe `batch` with all its tasks and its progress, as of one moment: every figure
    comes from one read of its tasks (`engine.counted_tasks`)."""
    tasks = engine.counted_tasks(batch)
    return {
        "id": str(batch.pk),
        "title": batch.title,
        "created_at": _time(batch.created_at),
        "request": _request_json(batch.request),
        "tasks": [task_json(c.task, attempts=c.attempts) for c in tasks],
        "progress": engine.progress_of(tasks),
    }


def _request_json(request: dict[str, Any]) -> dict[str, Any]:
    """Return a batch's request as planned, its ids strings as everywhere else (docs/api.md)."""
    named = {
        key: [str(i) for i in request[key]] for key in ("subjects", "references") if key in request
    }
    return {**request, **named}


def asset_json(asset: Asset) -> dict[str, Any]:
    return {
        "id": str(asset.pk),
        "sha256": asset.sha256,
        "mime": asset.mime,
        "width": asset.width,
        "height": asset.height,
        "size": asset.size,
        "label": asset.label,
        "origin": asset.origin,
        "subjects": [str(pk) for pk in asset.subjects.order_by("pk").values_list("pk", flat=True)],
        "task": _id_or_none(asset.task_id),
        "batch": _id_or_none(asset.batch_id),
        "provider": asset.provider,
        "model": asset.model,
        "ember_image_id": asset.ember_image_id,
        "ember_history_id": asset.ember_history_id,
        "created_at": _time(asset.created_at),
        "url": original_url(asset),
    }


def set_json(avatar_set: AvatarSet) -> dict[str, Any]:
    items = avatar_set.items.select_related("asset").order_by("position")
    return {
        "id": str(avatar_set.pk),
        "name": avatar_set.name,
        "published_at": _time(avatar_set.published_at),
        "assets": [
            {
                "id": str(item.asset.pk),
                "sha256": item.asset.sha256,
                "mime": item.asset.mime,
                "url": original_url(item.asset),
            }
            for item in items
        ],
    }


def original_url(asset: Asset) -> str:
    return reverse("api:asset-original", args=[asset.pk])


def _id_or_none(pk: object) -> str | None:
    return None if pk is None else str(pk)


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
