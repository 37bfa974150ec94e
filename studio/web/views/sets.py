"""The gallery of every asset and the sets chosen from it."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from studio import engine
from studio.models import (
    Asset,
    AvatarSet,
    Origin,
)
from studio.web.forms import ChooseForm, SetForm
from studio.web.views.common import LIST_PAGE, page_of, posted

GALLERY_PAGE = 60  # thumbnails per gallery page
PICKER_PAGE = 48  # thumbnails offered per page when adding to a set


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
        {"page": page_of(request, assets, GALLERY_PAGE), "origin": origin, "form": SetForm()},
    )


@login_required
@login_required
@require_http_methods(["GET", "POST"])
def sets(request: HttpRequest) -> HttpResponse:
    """List the sets, newest first a page at a time, or create one (from the gallery's ticks)."""
    form = SetForm(*posted(request))
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


@login_required
@require_http_methods(["GET", "POST"])
def set_detail(request: HttpRequest, set_id: int) -> HttpResponse:
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
            "page": page_of(request, candidates, PICKER_PAGE),
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
