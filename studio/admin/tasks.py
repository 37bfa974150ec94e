"""Tasks: where every task is, its attempts and Ember's saved answer (repairs: repairs.py)."""

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince

from studio import phrases
from studio.admin.base import ReadOnlyInline
from studio.admin.display import ProviderFilter, admin_link, pretty_json, protection_text
from studio.admin.repairs import TaskRepairs
from studio.ember.client import history_url, job_url
from studio.engine.lost_sends import done_with_lost_sends
from studio.models import (
    ACTIVE,
    RECONCILABLE,
    Attempt,
    HistorySearch,
    Kind,
    Subject,
    Task,
    TaskState,
)

# What a person runs to look a task up in Ember themselves (the token stays in their shell).
LOOKUP = """curl -H "Authorization: Bearer $EMBER_TOKEN" '{}'"""


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


class LeftInEmberFilter(admin.SimpleListFilter):
    """The tasks whose other paid originals (a resubmit's, a lost send's) a reconcile found
    left protected in Ember, which Avatars did not copy: once done, no other list shows them."""

    title = "paid originals left in Ember"
    parameter_name = "left_in_ember"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("yes", "Paid originals left in Ember"),
            # Not looked for yet: a done task's earlier send, whose answer was lost or whose
            # job finished late (lost_sends.py).
            ("lost", "Done, an earlier send not looked for (reconcile to look)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(error__contains=phrases.LEFT_IN_EMBER)
        if self.value() == "lost":
            return done_with_lost_sends(queryset)
        return queryset


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fields = (
        "attempt",
        "outcome",
        "ember_job_id",
        "idempotency_key",
        "submitted_at",
        "answered_at",
        "error",
    )
    readonly_fields = fields

    # A link to each attempt's own page: on a phone the table scrolls sideways, and a
    # region that scrolls must hold something a keyboard reaches (axe's
    # scrollable-region-focusable, found by a review at 390 px).
    @admin.display(description="attempt")
    def attempt(self, attempt: Attempt) -> str:
        return admin_link(attempt, f"Attempt {attempt.number}")


@admin.register(Task)
class TaskAdmin(TaskRepairs):
    # The long phase last: before it, attempts and age were past the region's right edge
    # at 1,280 px (a review).
    list_display = (
        "short_id",
        "state",
        "provider_label",
        "frame",
        "ordinal",
        "attempt_count",
        "age",
        "batch_link",
        "phase",
    )
    list_filter = (
        StateFilter,
        ProviderFilter,
        LeftInEmberFilter,
        ("batch", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("id", "batch__id", "ember_job_id")
    search_help_text = "Task id, batch id or Ember job id."
    ordering = ("-created_at",)
    list_select_related = ("batch",)
    inlines = (AttemptInline,)

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> Any:
        """The attempts, when there are any: an empty table still scrolled sideways on a
        phone, a region with nothing a keyboard reaches (axe, found by a review on a task
        cancelled before it was sent)."""
        if obj is not None and not obj.attempts.exists():
            return ()
        return super().get_inlines(request, obj)

    actions = (
        "reconcile_tasks",
        "retry_copy",
        "cancel_tasks",
        "resubmit_tasks",
        "requeue_tasks",
        "release_again",
    )
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
                )
            },
        ),
        (
            "Ember",
            {
                "fields": (
                    "ember_job_id",
                    "clip_key",
                    "history_searches",
                    "ember_lookup",
                    "saved_answer",
                    "protection",
                    "asset_link",
                )
            },
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

    @admin.display(description="idempotency key")
    def clip_key(self, task: Task) -> str:
        if task.kind != Kind.CLIP:
            return "none: an image has no key, every submit is a new paid job"
        return task.idempotency_key or "-"

    @admin.display(description="history searched by the worker")
    def history_searches(self, task: Task) -> str:
        """Say how often the worker looked for this task's lost submit in Ember's history."""
        noted = HistorySearch.objects.filter(task_id=task.pk).first()
        if noted is None:
            return "never"
        times = "once" if noted.searches == 1 else f"{noted.searches} times"
        return f"{times}, last at {noted.searched_at:%Y-%m-%d %H:%M:%S} UTC"

    @admin.display(description="look it up in Ember")
    def ember_lookup(self, task: Task) -> str:
        """Show what a person asks Ember to check on this task: its history, each job."""
        jobs = [(f"attempt {a.number}", a.ember_job_id) for a in task.attempts.all()]
        if task.ember_job_id not in {job for _name, job in jobs}:
            jobs.append(("the task", task.ember_job_id))
        asks = [
            (
                "Ember's history rows for this task (each names its attempt in "
                "source_metadata.attempt). An empty list does not prove a submit never "
                "arrived: the job may still be running.",
                LOOKUP.format(history_url(str(task.pk))),
            ),
            *((f"Job {job} ({name}):", LOOKUP.format(job_url(job))) for name, job in jobs if job),
        ]
        return format_html_join("", '<p>{}</p><pre class="admin-json">{}</pre>', asks)

    @admin.display(description="Ember's saved answer")
    def saved_answer(self, task: Task) -> str:
        if not task.result:
            return "-"
        summary = [
            ("image id", task.saved("image").get("id") or "-"),
            ("history id", task.saved("history").get("id") or "-"),
            ("history error", task.saved_history_error() or "-"),
        ]
        lines = format_html_join("", "<div><strong>{}:</strong> {}</div>", summary)
        return format_html("{}{}", lines, pretty_json(task.result))

    @admin.display(description="protection released")
    def protection(self, task: Task) -> str:
        return protection_text(task.protection_released)

    @admin.display(description="asset")
    def asset_link(self, task: Task) -> str:
        return admin_link(task.asset)
