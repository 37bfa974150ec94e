"""The batch pages: the recent ones, a new one, live progress, and cancelling what still can be."""

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from studio import engine
from studio.models import (
    FINAL,
    STOPPABLE,
    Batch,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.web.forms import BatchForm
from studio.web.views.common import login_required_htmx, posted, user_of

RECENT_BATCHES = 20
FORM_REUSED = (
    "This form had already planned this batch; nothing new was planned. "
    "Open a new form to plan another batch."
)


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Show the most recent batches with how far each got."""
    batches = Batch.objects.annotate(
        total=Count("tasks"), finished=Count("tasks", filter=Q(tasks__state__in=FINAL))
    )[:RECENT_BATCHES]
    return render(request, "studio/home.html", {"batches": batches})


@login_required
@require_http_methods(["GET", "POST"])
def batch_new(request: HttpRequest) -> HttpResponse:
    """Offer the new-batch form; plan the batch (once per form) and answer with its page."""
    form = BatchForm(*posted(request))
    if request.method == "POST" and form.is_valid():
        try:
            batch = engine.generate(
                request=form.to_request(), user=user_of(request), key=form.key()
            )
        except engine.InvalidRequest as exc:
            form.refuse(exc)
        except engine.KeyReused as exc:
            # Back, a change, and submit again: this form's token already planned a batch.
            messages.info(request, FORM_REUSED)
            return redirect("studio:batch", batch_id=exc.batch.pk)
        else:
            # A second post of the same form lands here too, with the first batch.
            return redirect("studio:batch", batch_id=batch.pk)
    return render(
        request, "studio/batch_new.html", {"form": form}, status=400 if form.errors else 200
    )


def _progress_context(batch: Batch) -> dict[str, Any]:
    counts = engine.progress(batch=batch)
    tasks = batch.tasks.order_by("provider", "frame", "ordinal")
    return {
        "batch": batch,
        "counts": counts,
        "states": [(state.value, counts[state.value]) for state in TaskState if counts[state]],
        "done": counts["finished"] == counts["total"],
        "tasks": tasks,
        "stoppable": STOPPABLE,
        "worker_status": WorkerHeartbeat.status(),
    }


@login_required
@require_GET
def batch_detail(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Show a batch with its live progress and its tasks."""
    found = get_object_or_404(Batch, pk=batch_id)
    return render(request, "studio/batch.html", _progress_context(found))


@login_required_htmx
@require_GET
def batch_progress(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Render the progress partial that the batch page polls (without a full reload)."""
    found = get_object_or_404(Batch, pk=batch_id)
    return render(request, "studio/_progress.html", _progress_context(found))


@login_required
@require_POST
def batch_cancel(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Cancel what can still be cancelled in a batch and say what was kept."""
    found = get_object_or_404(Batch, pk=batch_id)
    report = engine.cancel_batch(batch=found)
    cancelled, kept = len(report.cancelled), len(report.kept)
    messages.info(
        request,
        f"Cancelled {cancelled} task{pluralize(cancelled)}; kept {kept} already with Ember.",
    )
    return redirect("studio:batch", batch_id=found.pk)


@login_required
@require_POST
def task_cancel(request: HttpRequest, task_id: UUID) -> HttpResponse:
    """Cancel one task, or say that it is already with Ember and kept."""
    found = get_object_or_404(Task, pk=task_id)
    try:
        done = engine.cancel_task(task=found)
    except engine.TooLate as exc:
        messages.warning(request, str(exc))
    else:
        name = f"{found.provider_label} {found.frame} #{found.ordinal}"
        if done.state == TaskState.CANCELLED:
            messages.success(request, f"Cancelled {name}: nothing was sent to Ember.")
        else:
            messages.warning(request, f"{name}: {done.error}")
    return redirect("studio:batch", batch_id=found.batch_id)
