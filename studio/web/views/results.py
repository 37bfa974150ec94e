"""A batch's results as the page's main content, and the in-app viewer of one image."""

from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from studio import names, originals
from studio.models import (
    RECONCILABLE,
    STOPPABLE,
    Asset,
    AvatarSet,
    Batch,
    Subject,
    Task,
    TaskState,
)
from studio.web import progress
from studio.web.views.common import login_required, login_required_htmx

SET_CHOICES = 50  # draft sets offered in the viewer's "Add to a set"


def delivered(batch: Batch) -> list[Task]:
    """Return the batch's tasks that delivered an image, in the order the form listed them."""
    tasks = (
        batch.tasks.filter(asset__isnull=False)  # counted alike by the live progress
        .select_related("asset")
        .prefetch_related("asset__subjects")
        # `batch` too: the related manager hands each row its batch by that column, and
        # a column left out is read back one query a row.
        .only(
            "pk",
            "batch",
            "provider",
            "provider_label",
            "model",
            "frame",
            "ordinal",
            "state",
            "asset",
        )
    )
    return batch.in_form_order(list(tasks))


# What the place of an image that will not come without a person says.
NOT_COMING = {TaskState.FAILED: "Not made", TaskState.CANCELLED: "Cancelled"}
FOR_AN_OPERATOR = "Needs an operator"


def places(batch: Batch) -> list[Task]:
    """Return the batch's tasks without an image, each with the caption its image would
    have (`caption`), whether it may still come without a person (`coming`: under way, or
    checked with Ember by the worker itself, `progress.checked_itself`) and what its place
    says (`place`).

    The results keep a place the size of an image for every task: a review's batch page
    jumped as the images came in and pushed the rows below them away, and a later one saw
    every image after a failed one move back a place when the failed one's went.
    """
    tasks = list(
        batch.tasks.filter(asset__isnull=True).only(
            *("pk", "batch", "state", "phase", "provider", "provider_label", "model"),
            *("frame", "ordinal", "asset", "subjects"),
        )
    )
    uncertain = [task.pk for task in tasks if task.state == TaskState.UNCERTAIN]
    checked = progress.checked_itself(Task.objects.filter(pk__in=uncertain)) if uncertain else set()
    wanted = {pk for task in tasks for pk in task.subjects}
    people = Subject.objects.filter(pk__in=wanted).values_list("pk", "name")  # by name
    for task in tasks:
        who = ", ".join(name for pk, name in people if pk in task.subjects)
        what = names.generated(task.provider_label, task.frame, task.ordinal)
        task.caption = " · ".join(part for part in (who, what) if part)  # type: ignore[attr-defined]
        task.coming = progress.may_come(task, checked)  # type: ignore[attr-defined]
        task.place = _place(task)  # type: ignore[attr-defined]
    return tasks


def _place(task: Task) -> str:
    """Say what the place of a task's image says while it has none."""
    if task.coming:  # type: ignore[attr-defined]
        return "Checking with Ember" if task.state == TaskState.UNCERTAIN else "On its way"
    return NOT_COMING.get(TaskState(task.state), FOR_AN_OPERATOR)


def results_context(batch: Batch) -> dict[str, Any]:
    """Return what the results section shows: a tile for every task, in the form's order
    (`tiles`: the delivered images and the places of the others), and whether to choose."""
    results = delivered(batch)
    empty = places(batch)
    # Settled: nothing more arrives without a person, so favourites can be chosen (a review
    # was offered them while an image the worker went on to find was being checked).
    settled = not any(task.coming for task in empty) and not (  # type: ignore[attr-defined]
        batch.tasks.filter(state__in=STOPPABLE).exists()
    )
    return {
        "batch": batch,
        "results": results,
        "tiles": batch.in_form_order(results + empty) if empty else results,
        "delivered": len(results),
        "settled": settled,
        # What waits for an operator may still bring an image (a copy Ember holds, a job
        # whose answer was lost): a settled batch has not "delivered no images" then.
        # Asked only when there is none, as only then is it said.
        "awaiting": not results and settled and batch.tasks.filter(state__in=RECONCILABLE).exists(),
        "favourites_name": f"{batch.title} favourites"[:120],
    }


@login_required_htmx
@require_GET
def batch_results(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Render the results section alone, for the batch page to reload when more arrive."""
    found = get_object_or_404(Batch, pk=batch_id)
    return render(request, "studio/_results.html", results_context(found))


def _neighbours(asset: Asset) -> tuple[int | None, int | None, int, int]:
    """Return the previous and next result of the asset's batch, its place and the count."""
    if asset.batch is None:
        return None, None, 0, 0
    ids = [task.asset_id for task in delivered(asset.batch)]
    if asset.pk not in ids:
        return None, None, 0, len(ids)
    at = ids.index(asset.pk)
    before = ids[at - 1] if at > 0 else None
    after = ids[at + 1] if at + 1 < len(ids) else None
    return before, after, at + 1, len(ids)


@login_required
@require_GET
def asset_detail(request: HttpRequest, asset_id: int) -> HttpResponse:
    """Show one image large with what made it, and what can be done with it."""
    found = get_object_or_404(
        Asset.objects.select_related("batch", "task").prefetch_related("subjects"), pk=asset_id
    )
    before, after, place, count = _neighbours(found)
    in_sets = list(found.sets.order_by("name", "pk"))
    drafts = AvatarSet.objects.filter(published_at__isnull=True).exclude(
        pk__in=[s.pk for s in in_sets]
    )
    return render(
        request,
        "studio/asset.html",
        {
            "asset": found,
            "task": found.task,
            "previous": before,
            "next": after,
            "place": place,
            "count": count,
            "in_sets": in_sets,
            "drafts": drafts.order_by("-created_at", "-pk")[:SET_CHOICES],
            # Said before a download is tried: Chromium only reports a failed one.
            "lost": originals.holds(found.sha256, found.mime) is False,
        },
    )
