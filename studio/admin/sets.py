"""Sets: the chosen assets in order, and the guarded publish."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from studio import engine
from studio.admin.base import ReadOnlyInline, VersionedAdmin, VersionedForm
from studio.admin.display import admin_link
from studio.models import AvatarSet, Origin, SetItem

THUMB_SIZE = 128  # pixels, one of the studio's thumbnail sizes
PUBLISH_CONFIRMATION = "admin/studio/avatarset/publish_confirmation.html"
PUBLISH_AT_ONCE = 100  # sets one confirmation asks about: two fields each


class SetItemInline(ReadOnlyInline):
    model = SetItem
    fields = ("place", "thumbnail", "label", "origin", "history")
    readonly_fields = fields
    ordering = ("position",)
    verbose_name = "chosen asset"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("asset")

    @admin.display(description="#")
    def place(self, item: SetItem) -> int:
        return item.position + 1  # positions count from 0; people count from 1

    @admin.display(description="thumbnail")
    def thumbnail(self, item: SetItem) -> str:
        # The studio's cached thumbnail, fetched by the browser: the page reads no original.
        src = reverse("studio:asset-thumb", args=[item.asset_id, THUMB_SIZE])
        # Named: the link around it has no other words (axe's link-name, found by a review).
        image = format_html('<img src="{}" alt="{}" loading="lazy">', src, str(item.asset))
        return admin_link(item.asset, image)

    @admin.display(description="label")
    def label(self, item: SetItem) -> str:
        return admin_link(item.asset)  # its label, or its file name when it has none

    @admin.display(description="origin")
    def origin(self, item: SetItem) -> str:
        return item.asset.origin

    @admin.display(description="Ember history")
    def history(self, item: SetItem) -> str:
        if item.asset.ember_history_id:
            return item.asset.ember_history_id
        return "missing (blocks publishing)" if item.asset.origin == Origin.GENERATED else "-"


class SetForm(VersionedForm):
    """A draft set's name, kept as the studio and the API keep it (`engine.set_name`)."""

    def clean_name(self) -> str:
        try:
            return engine.set_name(self.cleaned_data["name"])
        except engine.InvalidRequest as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(AvatarSet)
class AvatarSetAdmin(VersionedAdmin):
    list_display = ("name", "item_count", "published_at", "created_at")
    search_fields = ("name",)
    editable = ("name",)
    fields = ("name", "published_at", "created_at", "version")
    form = SetForm
    inlines = (SetItemInline,)
    actions = ("publish_sets",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """A published set keeps the name sibling apps read it by: shown, not editable
        (a review renamed one here, which the studio and the API refuse). A publish
        landing while the page is open moves the version: the save is then refused."""
        shown = super().get_readonly_fields(request, obj)
        if obj is not None and obj.published_at is not None and "name" not in shown:
            shown.insert(0, "name")
        return shown

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(n_items=Count("items"))

    @admin.display(description="assets", ordering="n_items")
    def item_count(self, avatar_set: AvatarSet) -> int:
        n = getattr(avatar_set, "n_items", None)
        return avatar_set.items.count() if n is None else n

    @admin.action(description="Publish…", permissions=["change"])
    def publish_sets(
        self, request: HttpRequest, queryset: QuerySet[AvatarSet]
    ) -> TemplateResponse | None:
        """Ask first, as the studio does: publishing cannot be undone (a review's one press
        published every selected set). The confirmed form publishes each set as it showed
        it: one changed since is refused, and asked about again."""
        drafts = []
        for avatar_set in queryset:
            if avatar_set.published_at is None:
                drafts.append(avatar_set)
            else:  # not "published." again, as if this press had done it (a review)
                said = f"{avatar_set}: published already; nothing changed."
                self.message_user(request, said, messages.INFO)
        if len(drafts) > PUBLISH_AT_ONCE:  # its form would pass Django's 1,000 fields
            said = (
                f"{len(drafts)} unpublished sets were selected; publish at most "
                f"{PUBLISH_AT_ONCE} at a time. Nothing was published: select fewer."
            )
            self.message_user(request, said, messages.ERROR)
            return None
        if request.POST.get("post") != "yes":
            return self._publish_confirmation(request, drafts) if drafts else None
        for avatar_set in drafts:
            seen = request.POST.get(f"version-{avatar_set.pk}", "")
            self._publish(request, avatar_set, int(seen) if seen.isdigit() else -1)
        return None

    def _publish(self, request: HttpRequest, avatar_set: AvatarSet, seen: int) -> None:
        try:
            engine.publish(avatar_set=avatar_set, seen_version=seen)
        except engine.PublishRefused as exc:
            self.message_user(request, f"{avatar_set}: not published. {exc}", messages.ERROR)
        else:
            self.message_user(request, f"{avatar_set}: published.", messages.SUCCESS)

    def _publish_confirmation(
        self, request: HttpRequest, drafts: list[AvatarSet]
    ) -> TemplateResponse:
        """Show what publishing the `drafts` means, each with its images, and ask."""
        n = len(drafts)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Publish {n} set{'s' if n != 1 else ''}?",
            "opts": self.model._meta,
            "drafts": drafts,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, PUBLISH_CONFIRMATION, context)
