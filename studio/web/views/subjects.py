"""The subjects with their reference photos: added, renamed and removed."""

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_http_methods, require_POST

from studio import curation, engine, originals, uploads
from studio.models import (
    Asset,
    Origin,
    Subject,
)
from studio.web.forms import ReferenceForm, SubjectForm
from studio.web.views.common import LIST_PAGE, Window, page_of, posted

PHOTOS_PAGE = 48  # reference photos per page of a subject
ALREADY_THERE = "This photo is already there."


@login_required
@require_http_methods(["GET", "POST"])
def subjects(request: HttpRequest) -> HttpResponse:
    """List the subjects by name, a page at a time, or create one and go to its page.

    A name already taken is asked about first: two people may share a name.
    """
    form = SubjectForm(*posted(request))
    taken = None
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"].strip()
        taken = None if form.cleaned_data["confirm"] else _named(name)
        if taken is None:
            try:
                subject = engine.create_subject(name=name)
            except engine.InvalidRequest as exc:
                form.add_error("name", str(exc))
            else:
                messages.success(request, f"Created {subject.name}. Add a reference photo.")
                return redirect("studio:subject", subject_id=subject.pk)
    page = page_of(request, Subject.objects.order_by("name", "pk"), LIST_PAGE)
    _count_photos_and_find_faces(page)
    return render(
        request,
        "studio/subjects.html",
        {"page": page, "form": form, "taken": taken},
        status=400 if form.errors else 200,
    )


def _named(name: str) -> Subject | None:
    return Subject.objects.filter(name__iexact=name).order_by("pk").first() if name else None


def _count_photos_and_find_faces(page: Window) -> None:
    """Give each listed subject its photo count and first photo, in one query for the page."""
    first_photo = Asset.objects.filter(subjects=OuterRef("pk"), origin=Origin.UPLOADED).order_by(
        "created_at", "pk"
    )
    rows = (
        Subject.objects.filter(pk__in=[listed.pk for listed in page])
        .annotate(
            n=Count("assets", filter=Q(assets__origin=Origin.UPLOADED)),
            face=Subquery(first_photo.values("pk")[:1]),
        )
        .values_list("pk", "n", "face")
    )
    found = {pk: (n, face) for pk, n, face in rows}
    for listed in page:
        listed.photos, listed.face = found.get(listed.pk, (0, None))


@login_required
@require_http_methods(["GET", "POST"])
def subject_detail(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Show a subject's reference photos, newest first a page at a time, or store one."""
    found = get_object_or_404(Subject, pk=subject_id)
    form = ReferenceForm(*posted(request, files=True))
    if request.method == "POST" and not form.is_valid() and uploads.dropped_for_size(request):
        form.errors["photo"] = form.error_class([originals.too_large()])
    elif request.method == "POST" and form.is_valid():
        data, file_name = form.read()
        had = set(found.assets.filter(origin=Origin.UPLOADED).values_list("pk", flat=True))
        try:
            asset = engine.add_reference(subject=found, data=data, file_name=file_name)
        except (originals.NotAnImage, originals.ChecksumFailed) as exc:
            form.add_error("photo", str(exc))
        else:
            # The same bytes again come back as the subject's existing photo.
            if asset.pk in had:
                messages.info(request, ALREADY_THERE)
            else:
                messages.success(request, f"Added {asset.file_name} to {found.name}'s photos.")
            return redirect("studio:subject", subject_id=found.pk)
    photos = found.assets.filter(origin=Origin.UPLOADED).order_by("-created_at", "-id")
    return render(
        request,
        "studio/subject.html",
        {"subject": found, "page": page_of(request, photos, PHOTOS_PAGE), "form": form},
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def subject_rename(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Rename a subject, or say why the name was refused."""
    found = get_object_or_404(Subject, pk=subject_id)
    name = request.POST.get("name", "")
    _rename(request, found.name, lambda: curation.rename_subject(subject=found, name=name).name)
    return redirect("studio:subject", subject_id=found.pk)


@login_required
@require_POST
def subject_remove(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Remove a subject and the photos only it has, unless a task or a set uses one."""
    found = get_object_or_404(Subject, pk=subject_id)
    name = found.name
    try:
        removed = curation.remove_subject(subject=found)
    except curation.InUse as exc:
        messages.error(request, str(exc))
        return redirect("studio:subject", subject_id=subject_id)
    n = len(removed.photos)
    messages.success(request, f"Removed {name} and {n} photo{pluralize(n)}.")
    return redirect("studio:subjects")


def _rename(request: HttpRequest, old: str, rename: Callable[[], str]) -> None:
    """Rename through `rename` (which returns the new name) and say what happened."""
    try:
        new = rename()
    except engine.InvalidRequest as exc:
        messages.error(request, str(exc))
        return
    said = f"Renamed {old} to {new}"
    # One full stop, even when the new name ends with one ("Ada L.").
    messages.success(request, said if said.endswith(".") else f"{said}.")


def _photo_of(subject_id: int, asset_id: int) -> tuple[Subject, Asset]:
    found = get_object_or_404(Subject, pk=subject_id)
    photo = get_object_or_404(found.assets.filter(origin=Origin.UPLOADED), pk=asset_id)
    return found, photo


@login_required
@require_POST
def photo_rename(request: HttpRequest, subject_id: int, asset_id: int) -> HttpResponse:
    """Rename one of a subject's reference photos."""
    found, photo = _photo_of(subject_id, asset_id)
    name = request.POST.get("name", "")
    _rename(
        request,
        photo.file_name,
        lambda: curation.rename_photo(photo=photo, file_name=name).file_name,
    )
    return redirect("studio:subject", subject_id=found.pk)


@login_required
@require_POST
def photo_remove(request: HttpRequest, subject_id: int, asset_id: int) -> HttpResponse:
    """Take a photo off a subject (deleting it once nobody has it), unless it is used."""
    found, photo = _photo_of(subject_id, asset_id)
    try:
        removed = curation.remove_photo(photo=photo, subject=found)
    except curation.InUse as exc:
        messages.error(request, str(exc))
    else:
        if removed.kept_by:
            others = ", ".join(s.name for s in removed.kept_by)
            verb = "has" if len(removed.kept_by) == 1 else "have"
            said = (
                f"Removed {photo.file_name} from {found.name}'s photos; {others} still {verb} it."
            )
            messages.success(request, said)
        else:
            messages.success(request, f"Removed {photo.file_name}.")
    return redirect("studio:subject", subject_id=found.pk)
