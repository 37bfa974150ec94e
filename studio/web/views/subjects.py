"""The subjects with their reference photos."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from studio import engine, originals, uploads
from studio.models import (
    Origin,
    Subject,
)
from studio.web.forms import ReferenceForm, SubjectForm
from studio.web.views.common import LIST_PAGE, page_of, posted

PHOTOS_PAGE = 48  # reference photos per page of a subject


@login_required
@require_http_methods(["GET", "POST"])
def subjects(request: HttpRequest) -> HttpResponse:
    """List the subjects by name, a page at a time, or create one and go to its page."""
    form = SubjectForm(*posted(request))
    if request.method == "POST" and form.is_valid():
        try:
            subject = engine.create_subject(name=form.cleaned_data["name"])
        except engine.InvalidRequest as exc:
            form.add_error("name", str(exc))
        else:
            messages.success(request, f"Created {subject.name}. Add a reference photo.")
            return redirect("studio:subject", subject_id=subject.pk)
    page = page_of(request, Subject.objects.order_by("name", "pk"), LIST_PAGE)
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
def subject_detail(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Show a subject's reference photos, newest first a page at a time, or store one."""
    found = get_object_or_404(Subject, pk=subject_id)
    form = ReferenceForm(*posted(request, files=True))
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
        {"subject": found, "page": page_of(request, photos, PHOTOS_PAGE), "form": form},
        status=400 if form.errors else 200,
    )
