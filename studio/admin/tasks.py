"""Tasks: where every task is, its attempts and Ember's saved answer (repairs: repairs.py)."""

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince

from studio.admin.base import ReadOnlyInline
from studio.admin.display import admin_link, pretty_json, protection_text
from studio.admin.repairs import TaskRepairs
from studio.models import ACTIVE, RECONCILABLE, Attempt, Subject, Task, TaskState


class StateFilter(admin.SimpleListFilter):
    """Filter by one state, or by the groups the code names (docs/design.md §4)."""

    title = "state"
    parameter_name = "state"
    GROUPS = {"active": ACTIVE, "reconcilable": RECONCILABLE}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        def group(name: str, states: Iterable[TaskState]) -> tuple[str, str]:
            return name, f"{name.upper()} ({', '.join(s.value for s in states)})"

        return [
            *(group(name, states) for name, states in self.GROUPS.items()),
            *((s.value, s.value) for s in TaskState),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in self.GROUPS:
            return queryset.filter(state__in=self.GROUPS[value])
        if value in TaskState.values:
            return queryset.filter(state=value)
        return queryset


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fields = ("number", "outcome", "ember_job_id", "submitted_at", "answered_at", "error")
    readonly_fields = fields


@admin.register(Task)
class TaskAdmin(TaskRepairs):
    list_display = (
        "short_id",
        "state",
        "phase",
        "provider_label",
        "frame",
        "ordinal",
        "batch_link",
        "attempt_count",
        "age",
    )
    list_filter = (StateFilter, "provider", ("batch", admin.RelatedOnlyFieldListFilter))
    search_fields = ("id", "batch__id", "ember_job_id")
    search_help_text = "Task id, batch id or Ember job id."
    ordering = ("-created_at",)
    list_select_related = ("batch",)
    inlines = (AttemptInline,)
    actions = ("reconcile_tasks", "retry_copy", "cancel_tasks", "resubmit_tasks")
    # Nothing here is a person's to edit: the worker and the services own every field.
    fieldsets = (
        (
            "Where it is",
            {
                "fields": (
                    "state",
                    "phase",
                    "error",
                    "submitted_at",
                    "next_attempt_at",
                    "created_at",
                    "updated_at",
                    "version",
                )
            },
        ),
        (
            "Intent",
            {
                "fields": (
                    "batch_link",
                    "kind",
                    "provider",
                    "provider_label",
                    "model",
                    "frame",
                    "ordinal",
                    "prompt",
                    "subject_links",
                    "frozen_references",
                    "idempotency_key",
                )
            },
        ),
        (
            "Ember",
            {"fields": ("ember_job_id", "saved_answer", "protection", "asset_link")},
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(n_attempts=Count("attempts"))

    @admin.display(description="task", ordering="id")
    def short_id(self, task: Task) -> str:
        return str(task.pk)[:8]

    @admin.display(description="batch", ordering="batch__created_at")
    def batch_link(self, task: Task) -> str:
        return admin_link(task.batch)

    @admin.display(description="attempts", ordering="n_attempts")
    def attempt_count(self, task: Task) -> int:
        n = getattr(task, "n_attempts", None)
        return task.attempts.count() if n is None else n

    @admin.display(description="age", ordering="created_at")
    def age(self, task: Task) -> str:
        return timesince(task.created_at)

    @admin.display(description="subjects")
    def subject_links(self, task: Task) -> str:
        subjects = Subject.objects.filter(pk__in=task.subjects)
        return format_html_join(", ", "{}", ((admin_link(s),) for s in subjects)) or "-"

    @admin.display(description="references (frozen)")
    def frozen_references(self, task: Task) -> str:
        return pretty_json(task.references)

    @admin.display(description="Ember's saved answer")
    def saved_answer(self, task: Task) -> str:
        if not task.result:
            return "-"
        result = task.result
        image = result.get("image") or {}
        history = result.get("history") or {}
        summary = [
            ("image id", image.get("id") or "-"),
            ("history id", history.get("id") or "-"),
            ("history error", result.get("history_error") or "-"),
        ]
        lines = format_html_join("", "<div><strong>{}:</strong> {}</div>", summary)
        return format_html("{}{}", lines, pretty_json(result))

    @admin.display(description="protection released")
    def protection(self, task: Task) -> str:
        return protection_text(task.protection_released)

    @admin.display(description="asset")
    def asset_link(self, task: Task) -> str:
        return admin_link(task.asset)
