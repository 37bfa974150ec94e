"""What a row of Ember's history says about a task (docs/design.md §8): whether it carries
the task's id, whether it is a succeeded job's answer about one image, and whether its job
or image is already another task's. Reconcile (`recovery`) and the history search
(`adoption`) sort Ember's answers with these.
"""

from typing import Any

from studio.ember.client import SOURCE_APP, EmberError, check_result, is_safe_id, shown_id
from studio.models import Asset, Attempt, Task

# A task whose only rows in Ember's history name what another task holds.
HELD_PHASE = (
    "Ember's history has a row for this task, naming a job or an image another task holds; "
    "not taken: a person looks it up in Ember"
)


def names_any(error: str, rows: list[dict[str, Any]]) -> bool:
    """Say whether `error` already names the job or the image of one of `rows`."""
    ids = {str(row.get(key)) for row in rows for key in ("job_id", "image_id") if row.get(key)}
    return any(f" {found}" in error for found in ids)


def carries(row: dict[str, Any], task: Task) -> bool:
    """Say whether a history row carries this task's id, from this app (§8).

    Ember answers the query by its own rules; a row of another task (or app) is another
    paid original, which Avatars must never copy as this task's or release.
    """
    meta = row.get("source_metadata")
    return (
        isinstance(meta, dict)
        and meta.get("source_app") == SOURCE_APP
        and meta.get("task_id") == str(task.pk)
    )


def not_held(task: Task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return `rows` but those naming a job or an image another task already holds.

    Such a row carries this task's id, yet its job is another send's (an attempt of
    another task recorded it) or its image another task's original: taking it would file
    one paid original under two tasks and leave this task's own unlooked-for.
    """
    jobs = {str(row.get("job_id")) for row in rows if row.get("job_id")}
    images = {row_image(row) for row in rows if is_usable(row)}
    held_jobs = set(
        Attempt.objects.filter(ember_job_id__in=jobs)
        .exclude(task=task)
        .values_list("ember_job_id", flat=True)
    )
    held_images = set(
        Asset.objects.filter(ember_image_id__in=images, task__isnull=False)
        .exclude(task=task)
        .values_list("ember_image_id", flat=True)
    )
    return [
        row
        for row in rows
        if str(row.get("job_id")) not in held_jobs
        and not (is_usable(row) and row_image(row) in held_images)
    ]


def held_note(rows: list[dict[str, Any]]) -> str:
    """Say, for people, that `rows` carried this task's id but named what another task
    holds, naming their jobs and images (a review's note named none to look up)."""
    named = ", ".join(
        f"job {row.get('job_id') or '?'} (image {row.get('image_id') or '?'})" for row in rows[:3]
    )
    more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
    return _not_taken(
        len(rows),
        f"carrying this task's id but naming a job or an image another task already holds: "
        f"{named}{more}",
    )


def strays_note(count: int) -> str:
    """Say, for people, that Ember's answer held rows that do not carry this task's id."""
    return _not_taken(count, "that did not carry this task's id")


def _not_taken(count: int, which: str) -> str:
    if not count:
        return ""
    rows = "a row" if count == 1 else f"{count} rows"
    return (
        f"Ember's history answered {rows} {which}; not taken, and nothing was fetched or "
        "released for them."
    )


def is_usable(row: dict[str, Any]) -> bool:
    """Say whether a history row has a succeeded job's answer about one image."""
    try:
        check_result(row.get("result"))
    except EmberError:
        return False
    job_id, image_id = row.get("job_id"), row.get("image_id")
    if not isinstance(job_id, str | None) or not isinstance(image_id, str | None):
        return False
    if unsafe_ids(row):
        return False  # its job or image could not be asked about without leaving its route
    # A row naming two images cannot say which one it is about.
    return not image_id or image_id == row["result"]["image"]["id"]


def row_image(row: dict[str, Any]) -> str:
    """Return the Ember image id a usable history row is about."""
    return str(row.get("image_id") or row["result"]["image"]["id"])


def unsafe_ids(row: dict[str, Any]) -> list[str]:
    """Return the ids a history row names that Avatars will not put in a URL, shown escaped."""
    result = row.get("result")
    image = result.get("image") if isinstance(result, dict) else None
    named = [row.get("job_id"), row.get("image_id")]
    named.append(image.get("id") if isinstance(image, dict) else None)
    unsafe = [shown_id(v) for v in named if isinstance(v, str) and v and not is_safe_id(v)]
    return list(dict.fromkeys(unsafe))
