"""The batch pages: the recent ones, a new one, live progress, and cancelling what still can be."""

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from studio import engine
from studio.models import Attempt, Batch, Task, TaskState, WorkerHeartbeat
from studio.web import ask_again, progress
from studio.web.forms import BatchForm
from studio.web.views.common import login_required, login_required_htmx, page_of, posted, user_of
from studio.worker_seen import CANNOT_WRITE, RUNNING

BATCHES_PAGE = 20
THUMBS_PER_BATCH = 4
NO_SCRIPT_RELOAD = 10  # seconds between reloads of a batch page whose browser runs no script
# The session's note that this person's form just planned the batch it names: its page
# then tells the tab to drop the form's draft (batch_new.js keeps it in sessionStorage).
PLANNED = "avatars:planned-from-form"
FORM_REUSED = (
    "This form already started this batch; nothing new was started or paid for. "
    "Open a new form to plan another batch."
)


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Show the batches, newest first and a page at a time, with each one's outcome."""
    # The annotated query drops the model's ordering: say it, or pages come out in any order.
    batches = Batch.objects.annotate(**progress.group_counts()).order_by("-created_at", "-pk")
    window = page_of(request, batches, BATCHES_PAGE)
    thumbs = _first_images(list(window))
    for batch in window:
        batch.outcome = progress.Outcome.of_row(batch)
        batch.thumbs = thumbs[batch.pk]
    return render(request, "studio/home.html", {"batches": window, "page": window})


def _first_images(batches: list[Batch]) -> dict[UUID, list[int]]:
    """Return up to THUMBS_PER_BATCH delivered image ids per batch, in the form's order."""
    done: dict[UUID, list[Task]] = {batch.pk: [] for batch in batches}
    for task in Task.objects.filter(
        batch__in=batches, state=TaskState.DONE, asset__isnull=False
    ).only("pk", "batch_id", "asset_id", "provider", "model", "frame", "ordinal"):
        done[task.batch_id].append(task)
    return {
        batch.pk: [
            t.asset_id
            for t in batch.in_form_order(done[batch.pk])[:THUMBS_PER_BATCH]
            if t.asset_id is not None
        ]
        for batch in batches
    }


@login_required
@require_http_methods(["GET", "POST"])
def batch_new(request: HttpRequest) -> HttpResponse:
    """Offer the new-batch form; plan the batch (once per form) and answer with its page.

    Before anything is paid, the form asks again when it repeats a batch this person
    started minutes ago, or when it starts more jobs than AVATARS_CONFIRM_JOBS_ABOVE.
    """
    again = ask_again.batch_asked_again(request)
    filled, failed = ask_again.initial(again) if again is not None else ({}, 0)
    form = BatchForm(*posted(request), initial=filled)
    # Enter in a field submits through the form's first button (`enter`), never the one
    # that names the spend: the form comes back saying so, and nothing is planned. So
    # does a press of the button while it named another number than the form asks for
    # (without script its label is the one the page was served with).
    entered = request.method == "POST" and (
        bool(request.POST.get("enter")) or _named_otherwise(request, form)
    )
    if request.method == "POST" and not entered and form.is_valid():
        answer = _plan(request, form)
        if answer is not None:
            return answer
    # A form that asks the person first is not an error: it answers 200 with the question.
    status = 400 if form.errors else 200
    candidates, frames = form.job_factors()
    context = {
        "form": form,
        "jobs": candidates * frames,
        "candidates": candidates,
        "frames": frames,
        "ask": form.is_bound and not form.errors and not entered and form.asks_to_confirm(),
        "entered": entered,
        # The same batch again, and the button pressed again without ticking "again".
        "pressed_again": form.twin is not None and bool(request.POST.get("twin_asked")),
        "bare": form.subjects_without_photos(),
        "max_candidates": engine.MAX_CANDIDATES,
        "max_references": settings.AVATARS_MAX_REFERENCES,
        "max_jobs": settings.AVATARS_MAX_TASKS_PER_BATCH,
        "confirm_above": settings.AVATARS_CONFIRM_JOBS_ABOVE,
        "left_today": left_today(request),
        "daily_cap": settings.AVATARS_DAILY_TASK_CAP,
        "again": again if failed else None,
        "again_failed": failed,
    }
    return render(request, "studio/batch_new.html", context, status=status)


def left_today(request: HttpRequest) -> int | None:
    """Return how many more paid jobs the person may start under the daily cap, if any."""
    user = user_of(request)
    return engine.jobs_left_today(user) if user is not None else None


def _named_otherwise(request: HttpRequest, form: BatchForm) -> bool:
    """Say whether the Start button pressed named a number of paid jobs other than the form's.

    A post without the button's number (a client that is not the page) is judged as before.
    """
    named = request.POST.get("start")
    return named is not None and named != str(form.paid_jobs())


def _plan(request: HttpRequest, form: BatchForm) -> HttpResponse | None:
    """Plan the form's batch and answer with its page, or None when the form must ask first."""
    user = user_of(request)
    # Back to a form whose batch started, and its post sent again (a reload): the batch it
    # started is the answer, before any question that would read as if nothing had started.
    started = engine.planned_by(user, form.key()) if user is not None else None
    if started is not None:
        messages.info(request, FORM_REUSED)
        return _planned(request, started)
    ask = not form.cleaned_data["again"]
    asking_again = form.cleaned_data["again_of"]
    if ask:  # asked here with the jobs' question; asked again as it plans, for a race
        twin = engine.recent_twin(
            form.to_request(), user, key=form.key(), asking_again=asking_again
        )
        _note_twin(form, twin)
    if form.twin is not None or form.asks_to_confirm():
        return None
    try:
        batch = engine.generate(
            request=form.to_request(),
            user=user,
            key=form.key(),
            ask_if_repeated=ask,
            asking_again=asking_again,
        )
    except engine.RepeatedBatch as exc:
        # Another tab's form of the same batch planned it since this one was looked at.
        _note_twin(form, exc.batch)
        return None
    except engine.InvalidRequest as exc:
        form.refuse(exc)
        return None
    except engine.KeyReused as exc:
        # Back, a change, and submit again: this form's token already planned a batch.
        messages.info(request, FORM_REUSED)
        return _planned(request, exc.batch)
    # A second post of the same form lands here too, with the first batch.
    return _planned(request, batch)


def _planned(request: HttpRequest, batch: Batch) -> HttpResponse:
    """Answer with the page of the batch the form planned, noting that it came from a form."""
    request.session[PLANNED] = str(batch.pk)
    return redirect("studio:batch", batch_id=batch.pk)


def _note_twin(form: BatchForm, twin: Batch | None) -> None:
    """Note on `form` the batch it repeats, planned minutes ago, if any: when, and if whole."""
    form.twin = twin
    if twin is not None:
        # "3 hours", not "180 minutes": an asked-again batch's twin may be days old.
        age = timezone.now() - twin.created_at
        ago = timesince(twin.created_at, depth=1).replace("\xa0", " ")
        form.twin_ago = "less than a minute ago" if age < timedelta(minutes=1) else f"{ago} ago"
        form.twin_same = engine.same_intent(form.to_request(), twin.request)


def _progress_context(request: HttpRequest, batch: Batch) -> dict[str, Any]:
    counts = engine.progress(batch=batch)
    worker = WorkerHeartbeat.status()
    # A send is "being sent" only while a worker runs: one a dead worker left may not have
    # reached Ember (a re-review read "2 being sent" under "No worker seen for 16 s").
    sending = counts["sending"] if worker == RUNNING else 0
    # Looked for only when a task is uncertain: the summary polls every 2 s.
    uncertain = counts[TaskState.UNCERTAIN.value]
    checking = progress.checked_itself(batch.tasks.all()) if uncertain else set()
    outcome = progress.Outcome.of_counts(counts).checked(len(checking))
    tasks = progress.dress(batch.in_form_order(list(batch.tasks.all())), checking)
    return {
        "batch": batch,
        "counts": counts,
        "outcome": outcome,
        "done": outcome.done,
        "cancel": progress.cancel_offer(tasks, outcome),
        "tasks": tasks,
        **_worker_words(worker, tasks, outcome),
        "repair": _repair_link(request, batch, outcome),
        "seen": ".".join(str(task.version) for task in tasks),
        # Images on the page, whatever their state (the results section's own count).
        "delivered": sum(1 for task in tasks if task.asset_id),
        # And the images that may still come (results.places): one the worker stopped
        # checking for, or that failed, changes what its place says, and the results must
        # hear of it (a re-review's page kept "Checking with Ember" and withheld the
        # favourites for good).
        "places": sum(1 for t in tasks if t.asset_id or progress.may_come(t, checking)),
        "tab_title": outcome.tab_title(batch.title),
        "reload_seconds": NO_SCRIPT_RELOAD,
        # Counted as paid, since they may have been; the summary says how many are unsure:
        # those whose answer was lost and whose job nothing has named since (one the
        # history search or reconcile found reached Ember: a review's page doubted 20 of
        # 32 requests of a batch that was all done).
        # A send in flight is one too, until Ember's answer is read: said apart, as one
        # being sent (a review read "may not have reached Ember" in every ordinary start).
        "sending_requests": sending,
        "unsure_requests": counts["sending"]
        - sending
        + Attempt.objects.filter(
            task__batch=batch, outcome=Attempt.Outcome.UNKNOWN, ember_job_id=""
        ).count(),
    }


def _worker_words(worker: str, tasks: list[Task], outcome: progress.Outcome) -> dict[str, Any]:
    """Return what the page says of the worker (`worker`, its status) and of Ember."""
    running = worker == RUNNING
    stuck = worker.startswith(CANNOT_WRITE)  # runs, its writes refused (a full disk)
    away = progress.ember_away(tasks)
    return {
        # Said while something waits for a worker that does not run.
        "worker_gone": not running and bool(outcome.running or outcome.checking),
        # Not while no worker runs: "Avatars keeps trying by itself" beside "nothing here
        # moves until it runs again" (a review); the rows keep what their last try met.
        "ember_away": away and running,
        # Said above the rows too: on a phone they are screens below (a review's summary
        # said "2 in progress" and nothing more while Ember turned every send away).
        "ember_busy": running and not away and progress.ember_busy(tasks),
        "token_refused": running and progress.token_refused(tasks),  # a re-review's too
        # The words each queued row waiting its turn shows: the poll sends them again when
        # they change (Ember away, the worker stopped), without swapping the rows.
        "turn": progress.turn_words(tasks, worker_running=running, away=away),
        "worker_status": worker,
        # Beside the paid requests, only what the worker is, in words as long as "worker
        # running": how long it has been gone is said in the note (a longer line wrapped on
        # a phone and moved the page down).
        "worker_short": "worker cannot write" if stuck else worker.split(" for ", 1)[0],
        "worker_stuck": stuck,
    }


def _repair_link(request: HttpRequest, batch: Batch, outcome: progress.Outcome) -> str:
    """Return staff's link to the admin's list of the batch's stuck tasks ("" for others)."""
    if not (outcome.operator and request.user.is_staff):
        return ""
    query = urlencode({"state": "reconcilable", "batch__id__exact": str(batch.pk)})
    return f"{reverse('admin:studio_task_changelist')}?{query}"


@login_required
@require_GET
def batch_detail(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Show a batch with its live progress and its tasks."""
    found = get_object_or_404(Batch, pk=batch_id)
    context = _progress_context(request, found)
    context["planned"] = request.session.pop(PLANNED, None) == str(found.pk)
    return render(request, "studio/batch.html", context)


@login_required_htmx
@require_GET
def batch_progress(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Render what changed since the page's last look: the summary, and the rows that moved.

    The page sends the task versions it shows (`seen`) and the images it had
    (`delivered`); only rows whose version moved are swapped (by id), so the rest of
    the page, and the person's keyboard focus in it, stay put. A change in the number
    of delivered images tells the results section to reload (`results-changed`), and so
    does the batch's end (the page polls only while it goes on): a done batch's results
    offer "Choose favourites", also when its last task failed or was cancelled.
    """
    found = get_object_or_404(Batch, pk=batch_id)
    context = _progress_context(request, found)
    seen = request.GET.get("seen", "").split(".")
    tasks = context["tasks"]
    if len(seen) != len(tasks):
        seen = [""] * len(tasks)
    context["changed"] = [t for t, v in zip(tasks, seen, strict=True) if str(t.version) != v]
    # A wait runs down with no write to its row: said afresh on each poll, apart from the row,
    # for the tasks put back to wait (due later than their last change), not every queued one.
    swapped = {t.pk for t in context["changed"]}
    context["waiting"] = [t for t in tasks if t.pk not in swapped and _put_back_to_wait(t)]
    # And what the rows waiting their turn say, when that changed since the page's last look.
    turned = request.GET.get("turn", "") != context["turn"]
    context["turns"] = [t for t in tasks if t.pk not in swapped and t.turn] if turned else []
    # The cancel area is swapped only when what it offers changed, keeping a focused button.
    context["cancel_changed"] = request.GET.get("cancel", "") != context["cancel"]
    response = render(request, "studio/_progress_poll.html", context)
    moved = any(request.GET.get(key, "") != str(context[key]) for key in ("delivered", "places"))
    if context["done"] or moved:
        response["HX-Trigger"] = "results-changed"
    return response


@login_required
@require_POST
def batch_cancel(request: HttpRequest, batch_id: UUID) -> HttpResponse:
    """Cancel what can still be cancelled in a batch and say what was kept."""
    found = get_object_or_404(Batch, pk=batch_id)
    messages.info(request, engine.cancel_batch(batch=found).sentence())
    # To what was said, then the progress below it: "#progress-words" scrolled the sentence
    # and the title above the screen (a review).
    return redirect(reverse("studio:batch", args=[found.pk]) + "#said")


@login_required
@require_POST
def task_cancel(request: HttpRequest, task_id: UUID) -> HttpResponse:
    """Cancel one task, or say that it is already with Ember and kept."""
    found = get_object_or_404(Task, pk=task_id)
    already = found.state == TaskState.CANCELLED  # from another tab, say (a review)
    try:
        done = engine.cancel_task(task=found)
    except engine.TooLate as exc:
        messages.warning(request, str(exc))
    else:
        name = f"{found.provider_label} {found.frame} #{found.ordinal}"
        if already:
            messages.info(request, f"{name} was already cancelled: nothing was sent to Ember.")
        elif done.state == TaskState.CANCELLED:
            messages.success(request, f"Cancelled {name}: nothing was sent to Ember.")
        else:
            messages.warning(request, f"{name}: {done.error}")
    # Back at the task's row, not the page's top (a review: far down a phone's list).
    return redirect(reverse("studio:batch", args=[found.batch_id]) + f"#task-{found.pk}")


def _put_back_to_wait(task: Task) -> bool:
    """Say whether `task` waits out a back-off: queued, due later than its last change."""
    due = task.next_attempt_at
    return task.state == TaskState.QUEUED and due is not None and due > task.updated_at
