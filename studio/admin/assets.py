"""Assets: every original with its preview, where it came from, and Ember's ids."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from studio.admin.base import VersionedAdmin
from studio.admin.display import (
    ProviderFilter,
    admin_link,
    pretty_json,
    preview,
    protection_text,
    provider_label,
)
from studio.models import Asset, Origin


class HistoryFilter(admin.SimpleListFilter):
    """Find the generated originals that still block publishing."""

    title = "Ember history"
    parameter_name = "history"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("missing", "generated, history missing"), ("recorded", "history recorded")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "missing":
            return queryset.filter(origin=Origin.GENERATED, ember_history_id="")
        if self.value() == "recorded":
            return queryset.exclude(ember_history_id="")
        return queryset


@admin.register(Asset)
class AssetAdmin(VersionedAdmin):
    # What decides a repair first (the history that blocks publishing, the protection),
    # long ids last: at 1,280 px the list is wider than its region, and a review found
    # "Ember history" and protection past its right edge.
    list_display = (
        "__str__",
        "origin",
        "history",
        "protection",
        "provider_name",
        "created_at",
        "short_sha",
        "task_link",
        "batch_link",
        "ember_image_id",
    )
    list_filter = ("origin", HistoryFilter, ProviderFilter)
    list_select_related = ("task", "batch")
    search_fields = ("sha256", "label", "file_name", "ember_image_id", "ember_history_id")
    search_help_text = "Hash, label, file name, Ember image or history id."
    # A person may rename an original; everything else records what happened.
    editable = ("label",)
    fieldsets = (
        (None, {"fields": ("preview", "label")}),
        (
            "Original",
            {"fields": ("sha256", "file_name", "mime", "width", "height", "size", "origin")},
        ),
        (
            "Where it came from",
            {
                "fields": (
                    "task_link",
                    "batch_link",
                    "subject_list",
                    "references",
                    "provider",
                    "model",
                    "workflow",
                    "prompt",
                )
            },
        ),
        (
            "Ember",
            {
                "fields": (
                    "ember_image_id",
                    "ember_history_id",
                    "protection",
                    "upstream_json",
                )
            },
        ),
        (None, {"fields": ("created_at", "version")}),
    )

    @admin.display(description="preview")
    def preview(self, asset: Asset) -> str:
        # Change page only: reading an original for every changelist row is not cheap.
        return preview(asset)

    @admin.display(description="provider", ordering="provider")
    def provider_name(self, asset: Asset) -> str:
        # The label its task was planned under, which outlives a change to the catalogue.
        return asset.task.provider_label if asset.task else provider_label(asset.provider)

    @admin.display(description="sha256", ordering="sha256")
    def short_sha(self, asset: Asset) -> str:
        return asset.sha256[:12]

    @admin.display(description="Ember history", ordering="ember_history_id")
    def history(self, asset: Asset) -> str:
        if asset.ember_history_id:
            return asset.ember_history_id
        return "missing" if asset.origin == Origin.GENERATED else "-"

    @admin.display(description="protection released")
    def protection(self, asset: Asset) -> str:
        if asset.task is None:
            return "-"
        return protection_text(asset.task.protection_released)

    @admin.display(description="task")
    def task_link(self, asset: Asset) -> str:
        return admin_link(asset.task, str(asset.task_id)[:8]) if asset.task else "-"

    @admin.display(description="batch")
    def batch_link(self, asset: Asset) -> str:
        return admin_link(asset.batch)

    @admin.display(description="subjects")
    def subject_list(self, asset: Asset) -> str:
        links = [admin_link(s) for s in asset.subjects.all()]
        return format_html_join(", ", "{}", ((link,) for link in links)) or "-"

    @admin.display(description="Ember's answer")
    def upstream_json(self, asset: Asset) -> str:
        return pretty_json(asset.upstream)
