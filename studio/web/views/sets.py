"""The gallery of every asset and the sets chosen from it."""

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from studio import curation, engine
from studio.engine.sets import MAX_NAME
from studio.ids import row_id
from studio.models import Asset, AvatarSet, SetItem
from studio.web.forms import ChooseForm, SetForm
from studio.web.gallery import GalleryFilter
from studio.web.views.common import LIST_PAGE, login_required, page_of, posted, say_renamed

GALLERY_PAGE = 60  # thumbnails per gallery page
PICKER_PAGE = 48  # thumbnails offered per page when adding to a set
MOVES = ("up", "down")  # the buttons that move one chosen image
CAPTION_FIELDS = ("pk", "label", "file_name", "origin", "ember_history_id", "created_at", "batch")


@login_required
@require_GET
def gallery(request: HttpRequest) -> HttpResponse:
    """Show every asset as a lazy thumbnail, newest first, a page at a time, filtered."""
    shown = GalleryFilter.read(request.GET)
    assets = (
        Asset.objects.select_related("batch")
        .prefetch_related("subjects")
        .only(*CAPTION_FIELDS, "batch__title")
    )
    return render(
        request,
        "studio/gallery.html",
        {
            "page": page_of(request, shown.apply(assets), GALLERY_PAGE),
            "filter": shown,
            "query": shown.query(),
            "origin": shown.origin,
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def sets(request: HttpRequest) -> HttpResponse:
    """List the sets, newest first a page at a time, or create one from ticked images."""
    form = SetForm(*posted(request))
    if request.method == "POST":
        created = _create_set(request, form)
        if created is not None:
            messages.success(request, f"Created the set {created.name}.")
            _say_if_named_twice(request, created)
            return redirect("studio:set", set_id=created.pk)
        back = _back_to(request, form)
        if back:
            # Back to the ticks' own page (a batch, the gallery, an image), saying why.
            for error in form.non_field_errors() or [e for f in form.errors.values() for e in f]:
                messages.error(request, str(error))
            return redirect(back)
    page = page_of(request, AvatarSet.objects.order_by("-created_at", "-pk"), LIST_PAGE)
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


def _create_set(request: HttpRequest, form: SetForm) -> AvatarSet | None:
    """Create the posted set in the order its images were ticked, or leave the form's errors."""
    if not form.is_valid():
        return None
    try:
        return engine.create_set(name=form.cleaned_data["name"], asset_ids=form.chosen())
    except engine.InvalidRequest as exc:
        form.add_error(None, str(exc))
        return None


def _back_to(request: HttpRequest, form: SetForm) -> str:
    """Return the studio page the form came from, if it named a safe one."""
    back = str(form.data.get("next") or "")
    safe = url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()})
    return back if back.startswith("/") and safe else ""


@login_required
@require_POST
def add_to_set(request: HttpRequest, asset_id: int) -> HttpResponse:
    """Add one image to the end of a draft set, and stay with the image."""
    found = get_object_or_404(Asset.objects.only("pk"), pk=asset_id)
    target = get_object_or_404(AvatarSet, pk=row_id(request.POST.get("set", "")) or 0)
    try:
        chosen, _after = engine.change_choice(
            avatar_set=target, change=lambda now: now if found.pk in now else [*now, found.pk]
        )
    except engine.InvalidRequest as exc:
        messages.error(request, str(exc))
    else:
        already = found.pk in chosen
        said = f"Already in {target.name}." if already else f"Added to {target.name}."
        messages.success(request, said)
    return redirect("studio:asset", asset_id=found.pk)


@login_required
@require_http_methods(["GET", "POST"])
def set_detail(request: HttpRequest, set_id: int) -> HttpResponse:
    """Show a set's choice in order; add, move or remove assets while it is a draft."""
    found = get_object_or_404(AvatarSet, pk=set_id)
    if request.method == "POST":
        asking = _ask_before_deleting(request, found)
        if asking is not None:
            return asking
        # Back to the image that moved, its button focused (the page says which, below).
        back = _change_choice(request, found)
        return redirect(reverse("studio:set", args=[found.pk]) + back)
    return _set_page(request, found)


def _set_page(
    request: HttpRequest, found: AvatarSet, *, renaming: dict[str, Any] | None = None
) -> HttpResponse:
    """Render a set's page; `renaming` asks about a name another set has (value, taken)."""
    items = list(_chosen(found))
    chosen = [item.asset_id for item in items]
    candidates = (
        Asset.objects.exclude(pk__in=chosen)
        .select_related("batch")
        .prefetch_related("subjects")
        .only(*CAPTION_FIELDS, "sha256", "batch__title")
    )
    return render(
        request,
        "studio/set.html",
        {
            "set": found,
            "items": items,
            "blocked": _blocked(found),
            # Said before Publish is pressed, by the rule the publish refuses on (a review).
            "lost": engine.lost_originals(found),
            "empty": engine.SET_EMPTY,
            "page": page_of(request, candidates, PICKER_PAGE),
            # The picker's ticks are kept across its pages, apart from other sets' (pictures.js).
            "picker_keep": f"set-{found.pk}",
            "renaming": renaming,
            **_moved(request, chosen),
        },
    )


def _blocked(found: AvatarSet) -> list[Asset]:
    """Return the chosen images that keep `found` from being published, as the pages name them.

    The engine's rule, the one its publish refuses on: the set page and the publish page
    say the same thing, and only what the publish would refuse.
    """
    items = engine.blocking(found).select_related("asset").prefetch_related("asset__subjects")
    return [item.asset for item in items]


def _ask_before_deleting(request: HttpRequest, found: AvatarSet) -> HttpResponse | None:
    """Ask first when removing an image from the set would delete it: a photo taken off every
    subject earlier, kept only for this set. None when nothing needs asking."""
    if request.POST.get("action") != "remove" or request.POST.get("confirm") == "yes":
        return None
    asset_id = row_id(request.POST.get("asset", ""))
    if asset_id is None or not found.items.filter(asset_id=asset_id).exists():
        return None
    photos = curation.let_go_by(found, [asset_id])
    if not photos:
        return None
    return render(request, "studio/set_remove.html", {"set": found, "photo": photos[0]})


def _change_choice(request: HttpRequest, found: AvatarSet) -> str:
    """Apply one posted change to the set's choice, or say why it was not made.

    Return the query that brings the page back to a moved image ("" for other changes).
    """
    form = ChooseForm(request.POST)
    if not form.is_valid():
        errors = form.non_field_errors() or ["That change to the set was not understood."]
        messages.error(request, str(errors[0]))
        return ""
    try:
        # Applied to the choice as it stands when written, not as this page read it.
        before, after = engine.change_choice(avatar_set=found, change=form.reorder)
    except engine.InvalidRequest as exc:
        messages.error(request, str(exc))
        return ""
    for photo in curation.let_go(set(before) - set(after)):
        messages.info(
            request,
            f"Deleted the photo {photo.file_name}: it was removed from its subjects earlier, "
            "and nothing uses it any more.",
        )
    action = form.cleaned_data["action"]
    if action == "remove" and len(after) < len(before):  # said, as an add is (a review)
        at = before.index(form.cleaned_data["asset"]) + 1
        messages.success(request, f"Removed image {at} from {found.name}.")
    if action == "add":  # said, as the viewer's "Added to Family." is (a review)
        n = len(after) - len(before)
        messages.success(request, f"Added {n} image{pluralize(n)} to {found.name}.")
    if action not in MOVES:
        return ""
    return "?" + urlencode({"moved": form.cleaned_data["asset"], "by": action})


def _moved(request: HttpRequest, chosen: list[int]) -> dict[str, Any]:
    """Return the image that just moved and which of its buttons to focus, if any.

    The button pressed, or the other one when the move took the image to the end of the
    set where the pressed one is off.
    """
    moved, by = row_id(request.GET.get("moved", "")), request.GET.get("by", "")
    if moved is None or moved not in chosen or by not in MOVES or len(chosen) < 2:
        return {"moved": None, "focus": ""}
    at = chosen.index(moved)
    if (by, at) in (("up", 0), ("down", len(chosen) - 1)):
        by = "down" if by == "up" else "up"
    return {"moved": moved, "focus": by}


@login_required
@require_POST
def set_rename(request: HttpRequest, set_id: int) -> HttpResponse:
    """Rename a draft set, or say why not on its page."""
    found = get_object_or_404(AvatarSet, pk=set_id)
    old, name = found.name, request.POST.get("name", "")
    # A name another set has is asked about first, as a subject's is: the sets list could
    # not tell the two apart (a review renamed one onto another's name unasked).
    if request.POST.get("confirm") != "yes":
        taken = _named_alike(name.strip(), found) if name.strip() else None
        if taken is not None:
            return _set_page(request, found, renaming={"value": name, "taken": taken})
    try:
        engine.rename_set(avatar_set=found, name=name)
    except engine.InvalidRequest as exc:
        messages.error(request, str(exc))
    else:
        say_renamed(request, f"the set {old}", found.name)
        _say_if_named_twice(request, found)
    return redirect("studio:set", set_id=found.pk)


def _chosen(found: AvatarSet) -> QuerySet[SetItem]:
    """Return a set's chosen images in order, with what their captions name."""
    return found.items.select_related("asset").prefetch_related("asset__subjects")


def _named_alike(name: str, but: AvatarSet) -> AvatarSet | None:
    """Return another set than `but` named `name` (letter case aside), if there is one.

    None for a name too long to be one: SQLite refuses a LIKE pattern of 50,000 bytes.
    """
    if len(name) > MAX_NAME:
        return None
    return AvatarSet.objects.filter(name__iexact=name).exclude(pk=but.pk).first()


def _say_if_named_twice(request: HttpRequest, named: AvatarSet) -> None:
    """Say so when another set has the same name: the sets list could not tell them apart
    (a browser review made two of one name, one published, unawares)."""
    if _named_alike(named.name, named) is not None:
        messages.warning(
            request,
            f"Another set is also named {named.name}: rename one of them to tell them apart.",
        )


@login_required
@require_http_methods(["GET", "POST"])
def set_delete(request: HttpRequest, set_id: int) -> HttpResponse:
    """Ask before deleting a draft set; delete it (its images stay) once the person says so.

    A photo taken off every subject earlier and kept only for this set goes with it, and
    the question names it first.
    """
    found = get_object_or_404(AvatarSet, pk=set_id)
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        chosen = list(found.items.values_list("asset_id", flat=True))
        photos = curation.let_go_by(found, chosen)  # one look for them all, not one each
        context = {"set": found, "count": len(chosen), "photos": photos}
        return render(request, "studio/set_delete.html", context)
    try:
        held = engine.delete_set(avatar_set=found)
    except engine.InvalidRequest as exc:
        messages.error(request, str(exc))
        return redirect("studio:set", set_id=found.pk)
    gone = curation.let_go(held)
    said = f"Deleted the set {found.name}; its images stay in the gallery."
    if gone:
        said += f" Deleted with it: {', '.join(photo.file_name for photo in gone)}."
    messages.success(request, said)
    return redirect("studio:sets")


@login_required
@require_http_methods(["GET", "POST"])
def set_publish(request: HttpRequest, set_id: int) -> HttpResponse:
    """Ask once that publishing cannot be undone; publish on the answer, or say why not."""
    found = get_object_or_404(AvatarSet, pk=set_id)
    if found.published_at is not None:
        return redirect("studio:set-published", set_id=found.pk)
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        # A blocked set's page says why instead of asking: only its answer used to be refused.
        # The images and their order, shown where the page says "in this order" (a review:
        # it named an order it did not show).
        items = list(_chosen(found))
        context = {"set": found, "items": items, "count": len(items), "blocked": _blocked(found)}
        context["lost"] = engine.lost_originals(found)
        context["empty"] = engine.SET_EMPTY if not context["count"] else ""
        context["photos"] = engine.reference_photos(found)
        return render(request, "studio/set_publish.html", context)
    try:
        engine.publish(avatar_set=found, seen_version=_posted_version(request))
    except engine.PublishRefused as exc:
        messages.error(request, str(exc))
        # Changed since it was shown: the same question again, about the set as it is now.
        again = "studio:set-publish" if str(exc) == engine.SET_CHANGED else "studio:set"
        return redirect(again, set_id=found.pk)
    messages.success(request, f"Published {found.name}.")
    return redirect("studio:set-published", set_id=found.pk)


@login_required
@require_GET
def set_published(request: HttpRequest, set_id: int) -> HttpResponse:
    """Show a published set as sibling apps see it: read-only, in order, with their URL."""
    found = get_object_or_404(AvatarSet, pk=set_id, published_at__isnull=False)
    items = _chosen(found)
    api_url = request.build_absolute_uri(reverse("api:set", kwargs={"set_id": found.pk}))
    return render(
        request,
        "studio/set_published.html",
        {"set": found, "items": items, "api_url": api_url},
    )


def _posted_version(request: HttpRequest) -> int:
    """Return the set's version the confirmed page showed (-1, never a version, if none)."""
    try:
        return int(request.POST.get("version", ""))
    except ValueError:
        return -1
