"""The studio pages: thin views that read a form, call a service and render or redirect.

Every view requires a signed-in person, the image routes included.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import wraps
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from studio import engine, originals, thumbs, uploads
from studio.models import (
    ACTIVE,
    FINAL,
    Asset,
    AvatarSet,
    Batch,
    Origin,
    Subject,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.web.forms import BatchForm, ChooseForm, ReferenceForm, SetForm, SubjectForm

# A year: an image under these URLs never changes (it is named by its original's hash).
IMMUTABLE = "private, max-age=31536000, immutable"
GALLERY_PAGE = 60  # thumbnails per gallery page
LIST_PAGE = 50  # subjects or sets per page
PHOTOS_PAGE = 48  # reference photos per page of a subject
PICKER_PAGE = 48  # thumbnails offered per page when adding to a set
RECENT_BATCHES = 20
FORM_REUSED = (
    "This form had already planned this batch; nothing new was planned. "
    "Open a new form to plan another batch."
)
# The tasks a person may ask to stop: cancel answers for those already with Ember.
STOPPABLE = frozenset((*ACTIVE, TaskState.PREPARING, TaskState.SUBMITTING))


def login_required_htmx(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Require a signed-in person; tell htmx to load the sign-in page rather than swap it in.

    A poll that follows a redirect would otherwise put the whole sign-in page
    inside the progress section once a session expires.
    """
    guarded = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        htmx: HtmxDetails | None = getattr(request, "htmx", None)
        if htmx and not request.user.is_authenticated:
            page = htmx.current_url_abs_path or "/"
            return HttpResponseClientRedirect(f"{settings.LOGIN_URL}?{urlencode({'next': page})}")
        return guarded(request, *args, **kwargs)

    return wrapper


def _user(request: HttpRequest) -> User | None:
    return request.user if isinstance(request.user, User) else None


def _posted(request: HttpRequest, *, files: bool = False) -> tuple[Any, ...]:
    """Return the form data of a POST (even an empty one), or nothing for an unbound form."""
    if request.method != "POST":
        return ()
    return (request.POST, request.FILES) if files else (request.POST,)


@dataclass
class Window:
    """One page of a long list, found without counting the list.

    Django's Paginator runs COUNT(*) over every row to number the pages, which grows
    with history; a page only needs to know whether another one follows.
    """

    object_list: list[Any]
    number: int
    has_next: bool

    def __iter__(self) -> Iterator[Any]:
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    def previous_page_number(self) -> int:
        return self.number - 1

    def next_page_number(self) -> int:
        return self.number + 1


def _page(request: HttpRequest, items: Any, per_page: int) -> Window:
    raw = request.GET.get("page", "1")
    # isascii(): "²" is a digit to isdigit() but not to int().
    number = int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) < 100_000 else 1
    start = (number - 1) * per_page
    rows = list(items[start : start + per_page + 1])  # one more says a next page exists
    return Window(object_list=rows[:per_page], number=number, has_next=len(rows) > per_page)


# --- home, subjects ---------------------------------------------------------------


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
def subjects(request: HttpRequest) -> HttpResponse:
    """List the subjects by name, a page at a time, or create one and go to its page."""
    form = SubjectForm(*_posted(request))
    if request.method == "POST" and form.is_valid():
        try:
            subject = engine.create_subject(name=form.cleaned_data["name"])
        except engine.InvalidRequest as exc:
            form.add_error("name", str(exc))
        else:
            messages.success(request, f"Created {subject.name}. Add a reference photo.")
            return redirect("studio:subject", subject_id=subject.pk)
    page = _page(request, Subject.objects.order_by("name", "pk"), LIST_PAGE)
    # Counted for this page's subjects only, in one query, not for every subject.
    photos = dict(
        Subject.objects.filter(pk__in=[listed.pk for listed in page])
        .annotate(n=Count("assets", filter=Q(assets__origin=Origin.UPLOADED)))
        .values_list("pk", "n")
    )
    for listed in page:
        listed.photos = photos.get(listed.pk, 0)
    return render(
        request,
        "studio/subjects.html",
        {"page": page, "form": form},
        status=400 if form.errors else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def subject(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Show a subject's reference photos, newest first a page at a time, or store one."""
    found = get_object_or_404(Subject, pk=subject_id)
    form = ReferenceForm(*_posted(request, files=True))
    if request.method == "POST" and not form.is_valid() and uploads.dropped_for_size(request):
        form.errors["photo"] = form.error_class([originals.too_large()])
    elif request.method == "POST" and form.is_valid():
        data, file_name = form.read()
        try:
            asset = engine.add_reference(subject=found, data=data, file_name=file_name)
        except (originals.NotAnImage, originals.ChecksumFailed) as exc:
            form.add_error("photo", str(exc))
        else:
            messages.success(request, f"Added {asset.file_name} to {found.name}'s photos.")
            return redirect("studio:subject", subject_id=found.pk)
    photos = found.assets.filter(origin=Origin.UPLOADED).order_by("-created_at", "-id")
    return render(
        request,
        "studio/subject.html",
        {"subject": found, "page": _page(request, photos, PHOTOS_PAGE), "form": form},
        status=400 if form.errors else 200,
    )


# --- batches ------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def batch_new(request: HttpRequest) -> HttpResponse:
    """Offer the new-batch form; plan the batch (once per form) and answer with its page."""
    form = BatchForm(*_posted(request))
    if request.method == "POST" and form.is_valid():
        try:
            batch = engine.generate(request=form.to_request(), user=_user(request), key=form.key())
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
def batch(request: HttpRequest, batch_id: UUID) -> HttpResponse:
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


# --- gallery, sets ------------------------------------------------------------------


@login_required
@require_GET
def gallery(request: HttpRequest) -> HttpResponse:
    """Show every asset as a lazy thumbnail, newest first, a page at a time."""
    origin = request.GET.get("origin", "")
    assets = Asset.objects.select_related("batch").only(
        "pk",
        "label",
        "file_name",
        "origin",
        "ember_history_id",
        "created_at",
        "batch",
        "batch__title",
    )
    if origin in Origin.values:
        assets = assets.filter(origin=origin)
    return render(
        request,
        "studio/gallery.html",
        {"page": _page(request, assets, GALLERY_PAGE), "origin": origin, "form": SetForm()},
    )


@login_required
@require_http_methods(["GET", "POST"])
def sets(request: HttpRequest) -> HttpResponse:
    """List the sets, newest first a page at a time, or create one (from the gallery's ticks)."""
    form = SetForm(*_posted(request))
    if request.method == "POST" and form.is_valid():
        try:
            created = engine.create_set(
                name=form.cleaned_data["name"], asset_ids=form.cleaned_data["assets"]
            )
        except engine.InvalidRequest as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Created the set {created.name}.")
            return redirect("studio:set", set_id=created.pk)
    page = _page(request, AvatarSet.objects.order_by("-created_at", "-pk"), LIST_PAGE)
    # Counted for this page's sets only, in one query, not for every set.
    chosen = dict(
        AvatarSet.objects.filter(pk__in=[listed.pk for listed in page])
        .annotate(n=Count("items"))
        .values_list("pk", "n")
    )
    for listed in page:
        listed.chosen = chosen.get(listed.pk, 0)
    return render(
        request,
        "studio/sets.html",
        {"page": page, "form": form},
        status=400 if form.errors else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def avatar_set(request: HttpRequest, set_id: int) -> HttpResponse:
    """Show a set's choice in order; add, move or remove assets while it is a draft."""
    found = get_object_or_404(AvatarSet, pk=set_id)
    items = list(found.items.select_related("asset"))
    chosen = [item.asset_id for item in items]
    if request.method == "POST":
        form = ChooseForm(request.POST)
        if form.is_valid():
            try:
                engine.choose_assets(avatar_set=found, asset_ids=form.reorder(chosen))
            except engine.InvalidRequest as exc:
                messages.error(request, str(exc))
        else:
            errors = form.non_field_errors() or ["That change to the set was not understood."]
            messages.error(request, str(errors[0]))
        return redirect("studio:set", set_id=found.pk)
    candidates = Asset.objects.exclude(pk__in=chosen).only(
        "pk", "sha256", "label", "file_name", "origin", "ember_history_id"
    )
    return render(
        request,
        "studio/set.html",
        {
            "set": found,
            "items": items,
            "blocked": [
                i.asset
                for i in items
                if i.asset.origin == Origin.GENERATED and not i.asset.ember_history_id
            ],
            "page": _page(request, candidates, PICKER_PAGE),
        },
    )


@login_required
@require_POST
def set_publish(request: HttpRequest, set_id: int) -> HttpResponse:
    """Publish a set, or show the guard's sentence when it refuses."""
    found = get_object_or_404(AvatarSet, pk=set_id)
    try:
        engine.publish(avatar_set=found)
    except engine.PublishRefused as exc:
        messages.error(request, str(exc))
        return redirect("studio:set", set_id=found.pk)
    messages.success(request, f"Published {found.name}.")
    return redirect("studio:set-published", set_id=found.pk)


@login_required
@require_GET
def set_published(request: HttpRequest, set_id: int) -> HttpResponse:
    """Show a published set as sibling apps see it: read-only, in order."""
    found = get_object_or_404(AvatarSet, pk=set_id, published_at__isnull=False)
    items = found.items.select_related("asset")
    return render(request, "studio/set_published.html", {"set": found, "items": items})


# --- images ---------------------------------------------------------------------------


def _image_response(
    request: HttpRequest, etag: str, mime: str, read: Callable[[], bytes]
) -> HttpResponse:
    """Answer with immutable image bytes that a browser must take for `mime` and nothing else.

    A browser that already holds this ETag gets 304 without the file being read.
    """
    quoted = f'"{etag}"'
    response: HttpResponse
    if quoted in request.headers.get("If-None-Match", ""):
        response = HttpResponseNotModified()
    else:
        try:
            data = read()
        except FileNotFoundError:
            return _unavailable("The original is not in the store.")
        except originals.ChecksumFailed as exc:
            return _unavailable(str(exc))
        response = HttpResponse(data, content_type=mime)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = IMMUTABLE
    response["ETag"] = quoted
    return response


def _unavailable(message: str) -> HttpResponse:
    return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def asset_thumb(request: HttpRequest, asset_id: int, size: int) -> HttpResponse:
    """Send an asset's cached thumbnail, deriving it from the original the first time."""
    if size not in thumbs.SIZES:
        raise Http404("No such thumbnail size.")
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)

    def read() -> bytes:
        return thumbs.thumbnail(sha256=found.sha256, mime=found.mime, size=size).read_bytes()

    return _image_response(request, f"{found.sha256}-{size}", thumbs.MIME, read)


@login_required
@require_GET
def asset_original(request: HttpRequest, asset_id: int) -> HttpResponse:
    """Send an asset's original bytes, checked against their hash, to a signed-in person."""
    found = get_object_or_404(Asset.objects.only("sha256", "mime"), pk=asset_id)
    return _image_response(
        request, found.sha256, found.mime, lambda: originals.read(found.sha256, found.mime)
    )
