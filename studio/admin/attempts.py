"""Attempts: every request to Ember that may have been paid for, to look at."""

from django.contrib import admin

from studio.admin.base import RecordAdmin
from studio.admin.display import admin_link
from studio.models import Attempt


@admin.register(Attempt)
class AttemptAdmin(RecordAdmin):
    # The first column links to the attempt (Django's), so it is not the task's link: a
    # link inside that link was split in two, one of them empty (axe's link-name, a review).
    list_display = ("name", "task_link", "outcome", "ember_job_id", "submitted_at", "answered_at")
    list_filter = ("outcome",)
    list_select_related = ("task",)
    search_fields = ("ember_job_id", "task__id")
    search_help_text = "Ember job id or task id."

    @admin.display(description="attempt", ordering="number")
    def name(self, attempt: Attempt) -> str:
        return f"Attempt {attempt.number}"

    @admin.display(description="task", ordering="task")
    def task_link(self, attempt: Attempt) -> str:
        task = attempt.task
        name = f"{str(task.pk)[:8]} {task.provider_label} {task.frame} #{task.ordinal}"
        return admin_link(task, f"{name} ({task.state})")
