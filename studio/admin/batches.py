"""Batches: progress by state, their tasks, and cancelling what was not sent."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from studio import engine
from studio.admin.base import ReadOnlyInline, VersionedAdmin
from studio.admin.display import admin_link, pretty_json
from studio.models import Batch, Task, TaskState


class TaskInline(ReadOnlyInline):
    model = Task
    fields = ("task_link", "state", "phase", "provider_label", "frame", "ordinal", "ember_job_id")
    readonly_fields = fields
    ordering = ("provider", "frame", "ordinal")

    @admin.display(description="task")
    def task_link(self, task: Task) -> str:
        return admin_link(task, str(task.pk)[:8])


@admin.register(Batch)
class BatchAdmin(VersionedAdmin):
    list_display = ("title", "created_at", "created_by", "progress_summary")
    search_fields = ("id", "title")
    search_help_text = "Batch id or title."
    inlines = (TaskInline,)
    actions = ("cancel_batches",)
    fields = ("title", "id", "created_by", "created_at", "version", "progress", "request_json")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # One query for the whole page: a conditional count per state.
        counts = {f"n_{s.value}": Count("tasks", filter=Q(tasks__state=s)) for s in TaskState}
        return super().get_queryset(request).select_related("created_by").annotate(**counts)

    @admin.display(description="progress")
    def progress_summary(self, batch: Batch) -> str:
        parts = [
            f"{s.value} {getattr(batch, f'n_{s.value}', 0)}"
            for s in TaskState
            if getattr(batch, f"n_{s.value}", 0)
        ]
        return " · ".join(parts) or "no tasks"

    @admin.display(description="tasks by state")
    def progress(self, batch: Batch) -> SafeString:
        counts = engine.progress(batch=batch)
        rows = [(s.value, counts[s.value]) for s in TaskState if counts[s.value]]
        rows += [
            ("total", counts["total"]),
            ("finished", counts["finished"]),
            ("paid requests", counts["paid_requests"]),
        ]
        return format_html(
            "<table><tbody>{}</tbody></table>",
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        )

    @admin.display(description="request")
    def request_json(self, batch: Batch) -> str:
        return pretty_json(batch.request)

    @admin.action(description="Cancel what has not been sent yet", permissions=["change"])
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        for batch in queryset:
            outcome = engine.cancel_batch(batch=batch)
            self.message_user(
                request,
                f"Batch {batch}: cancelled {len(outcome.cancelled)} task(s); "
                f"kept {len(outcome.kept)} already with Ember; "
                f"{len(outcome.ended)} had already ended.",
                messages.SUCCESS if outcome.cancelled else messages.INFO,
            )
