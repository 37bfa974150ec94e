"""The originals scrubs (`manage.py check_originals`), to look at (the index shows the last)."""

from django.contrib import admin

from studio.admin.base import RecordAdmin
from studio.models import ScrubReport


@admin.register(ScrubReport)
class ScrubReportAdmin(RecordAdmin):
    list_display = ("finished_at", "passed", "repair", "summary")
    list_filter = ("passed", "repair")
    fieldsets = (
        (None, {"fields": ("started_at", "finished_at", "repair", "passed", "summary")}),
        (
            "Counts",
            {
                "fields": (
                    "checked",
                    "missing",
                    "corrupt",
                    "orphans",
                    "temporary",
                    "repaired",
                    "unrepaired",
                )
            },
        ),
        ("What it found (the first lines)", {"fields": ("problems",)}),
    )
