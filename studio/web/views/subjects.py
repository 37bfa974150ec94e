"""The subjects with their reference photos: added, renamed and removed."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from studio import curation, engine, originals, uploads
from studio.engine.library import SUBJECT_NAME_MAX, Upload, upload_reference
from studio.models import (
    Asset,
    Origin,
    Subject,
)
from studio.web.forms import ReferenceForm, SubjectForm
from studio.web.refusals import ONE_OF_SEVERAL, photo_too_large, plain_refusal
from studio.web.views.common import (
    LIST_PAGE,
    Window,
    login_required,
    page_of,
    posted,
    say_renamed,
)

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
    """Return the first subject named `name`, letter case aside (None for a name too long to
    be one: SQLite refuses a LIKE pattern of 50,000 bytes, and a review's rename was a 500)."""
    if not name or len(name) > SUBJECT_NAME_MAX:
        return None
    return Subject.objects.filter(name__iexact=name).order_by("pk").first()


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


@dataclass(frozen=True)
class Renaming:
    """A refused rename, shown again beside its field: what was typed and why it was refused."""

    value: str
    error: str = ""
    photo: int | None = None  # the photo renamed, or None for the subject
    taken: Subject | None = None  # another subject of that name: asked about first


@login_required
@require_http_methods(["GET", "POST"])
def subject_detail(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Show a subject's reference photos, newest first a page at a time, or store one."""
    found = get_object_or_404(Subject, pk=subject_id)
    form = ReferenceForm(*posted(request, files=True))
    if request.method == "POST" and not form.is_valid() and uploads.dropped_for_size(request):
        form.errors["photo"] = form.error_class([photo_too_large()])
    elif request.method == "POST" and not form.is_valid() and uploads.cut_off(request):
        form.errors["photo"] = form.error_class([uploads.CUT_OFF])
    elif request.method == "POST" and form.is_valid():
        data, file_name = form.read()
        had = set(found.assets.filter(origin=Origin.UPLOADED).values_list("pk", flat=True))
        try:
            upload = upload_reference(subject=found, data=data, file_name=file_name)
        except (originals.NotAnImage, originals.ChecksumFailed, engine.StorageRefused) as exc:
            form.add_error("photo", str(exc))
        else:
            _say_added(request, found, upload, had)
            if request.headers.get(ONE_OF_SEVERAL):
                # Taken, said in words by the page once the last is sent. A 204, not a
                # redirect: a redirect is also how a sign-in that ran out answers.
                return HttpResponse(status=204)
            return redirect("studio:subject", subject_id=found.pk)
    if request.method == "POST" and request.headers.get(ONE_OF_SEVERAL):
        # One of several photos sent one after another (photos.js): the reason alone, so
        # that what was said of the photos before it waits for the page itself.
        return plain_refusal(" ".join(str(e) for errors in form.errors.values() for e in errors))
    return _subject_page(request, found, form=form)


def _say_added(request: HttpRequest, subject: Subject, upload: Upload, had: set[int]) -> None:
    """Say what an upload did: a new photo, one the subject has, or one known by another name."""
    asset = upload.asset
    if asset.pk in had:
        messages.info(request, ALREADY_THERE)
    elif upload.known:
        # The photo keeps the name it is known by: a name is the photo's, not a subject's.
        messages.success(
            request,
            f"Added to {subject.name}'s photos: it is the same photo already known as "
            f"“{asset.file_name}”.",
        )
    else:
        messages.success(request, f"Added {asset.file_name} to {subject.name}'s photos.")


def _subject_page(
    request: HttpRequest,
    subject: Subject,
    *,
    form: ReferenceForm | None = None,
    renaming: Renaming | None = None,
) -> HttpResponse:
    """Render a subject's page; 400 when it shows a refused upload or rename."""
    form = form or ReferenceForm()
    # How many other subjects share each photo (and so its name). A subquery: a Count over
    # `subjects` would reuse the join that picks this subject's photos and always say 1.
    sharing = Asset.objects.filter(pk=OuterRef("pk")).annotate(n=Count("subjects")).values("n")
    photos = (
        subject.assets.filter(origin=Origin.UPLOADED)
        .annotate(others=Subquery(sharing) - 1)
        .order_by("-created_at", "-id")
    )
    context = {
        "subject": subject,
        "page": page_of(request, photos, PHOTOS_PAGE),
        "form": form,
        "renaming": renaming,
        "limit_mb": f"{settings.AVATARS_MAX_IMAGE_BYTES / (1024 * 1024):g}",
        "limit_bytes": settings.AVATARS_MAX_IMAGE_BYTES,
        "limit_mp": f"{settings.AVATARS_MAX_IMAGE_PIXELS / 1_000_000:g}",
    }
    refused = bool(form.errors) or (renaming is not None and renaming.taken is None)
    return render(request, "studio/subject.html", context, status=400 if refused else 200)


@login_required
@require_POST
def subject_rename(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Rename a subject, or show the page again with the refusal beside the typed name."""
    found = get_object_or_404(Subject, pk=subject_id)
    name = request.POST.get("name", "")
    old = found.name
    # A name another subject has is asked about first, as when adding: two people may
    # share a name, but two entries alike in every list are more often a slip.
    taken = None if request.POST.get("confirm") == "yes" else _named(name.strip())
    if taken is not None and taken.pk != found.pk:
        return _subject_page(request, found, renaming=Renaming(value=name, taken=taken))
    try:
        curation.rename_subject(subject=found, name=name)
    except engine.InvalidRequest as exc:
        return _subject_page(request, found, renaming=Renaming(value=name, error=str(exc)))
    say_renamed(request, old, found.name)
    return redirect("studio:subject", subject_id=found.pk)


def _photo_of(subject_id: int, asset_id: int) -> tuple[Subject, Asset]:
    found = get_object_or_404(Subject, pk=subject_id)
    photo = get_object_or_404(found.assets.filter(origin=Origin.UPLOADED), pk=asset_id)
    return found, photo


def _subject_url(subject: Subject, request: HttpRequest) -> str:
    """Return the subject's page, at the page of photos the request came from."""
    url = reverse("studio:subject", kwargs={"subject_id": subject.pk})
    number = page_of(request, [], PHOTOS_PAGE).number
    return f"{url}?page={number}" if number > 1 else url


@login_required
@require_POST
def photo_rename(request: HttpRequest, subject_id: int, asset_id: int) -> HttpResponse:
    """Rename one of a subject's reference photos (the name every subject that has it sees)."""
    found, photo = _photo_of(subject_id, asset_id)
    name = request.POST.get("name", "")
    old = photo.file_name
    try:
        curation.rename_photo(photo=photo, file_name=name)
    except engine.InvalidRequest as exc:
        refused = Renaming(value=name, error=str(exc), photo=photo.pk)
        return _subject_page(request, found, renaming=refused)
    say_renamed(request, old, photo.file_name)
    return redirect(_subject_url(found, request))


@login_required
@require_http_methods(["GET", "POST"])
def subject_remove(request: HttpRequest, subject_id: int) -> HttpResponse:
    """Ask before removing a subject; remove it once the person says so (`confirm`).

    The photos nothing else needs go with the subject; those another subject, a batch
    or a set uses stay. A subject a batch was made of is not removed.
    """
    found = get_object_or_404(Subject, pk=subject_id)
    if not _confirmed(request):
        removal = curation.plan_subject_removal(subject=found)
        return render(request, "studio/remove.html", {"subject": found, "removal": removal})
    name = found.name
    try:
        removal = curation.remove_subject(subject=found)
    except curation.InUse as exc:
        messages.error(request, str(exc))
        return redirect("studio:subject", subject_id=subject_id)
    n, kept = len(removal.deleted), len(removal.kept)
    said = f"Removed {name} and {n} photo{pluralize(n)}." if n else f"Removed {name}."
    if kept:
        said += (
            f" {kept} shared photo{pluralize(kept)} {'stays' if kept == 1 else 'stay'} "
            f"for the others that use {'it' if kept == 1 else 'them'}."
        )
    messages.success(request, said)
    return redirect("studio:subjects")


@login_required
@require_http_methods(["GET", "POST"])
def photo_remove(request: HttpRequest, subject_id: int, asset_id: int) -> HttpResponse:
    """Ask before taking a photo off a subject; do it once the person says so (`confirm`).

    The photo is deleted only when nothing else (another subject, a batch, a set) needs it.
    """
    found, photo = _photo_of(subject_id, asset_id)
    if not _confirmed(request):
        removal = curation.plan_photo_removal(photo=photo, subject=found)
        context = {"subject": found, "photo_removal": removal, "back": _subject_url(found, request)}
        return render(request, "studio/remove.html", context)
    removal = curation.remove_photo(photo=photo, subject=found)
    if removal.deletes:
        messages.success(request, f"Removed {photo.file_name}.")
    else:
        messages.success(
            request, f"Removed {photo.file_name} from {found.name}'s photos; {_kept(removal)}."
        )
    # To what was said, with the focus: a review's phone came back at the page's top, its
    # place in a long grid of photos lost.
    return redirect(_subject_url(found, request) + "#said")


def _kept(removal: curation.PhotoRemoval) -> str:
    """Say who keeps a photo taken off one subject: "Bo still has it and the set “A” uses it"."""
    parts = []
    if removal.others:
        names = ", ".join(subject.name for subject in removal.others)
        parts.append(f"{names} still {'has' if len(removal.others) == 1 else 'have'} it")
    if removal.users:
        parts.append(f"{removal.users} still {removal.users.verb} it")
    return " and ".join(parts)


def _confirmed(request: HttpRequest) -> bool:
    """Say whether the person confirmed a removal: the confirm page's own POST."""
    return request.method == "POST" and request.POST.get("confirm") == "yes"
