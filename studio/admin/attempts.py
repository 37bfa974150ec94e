"""Attempts: every request to Ember that may have been paid for, to look at."""

from django.contrib import admin

from studio.admin.base import RecordAdmin
from studio.models import Attempt


@admin.register(Attempt)
class AttemptAdmin(RecordAdmin):
    list_display = ("task", "number", "outcome", "ember_job_id", "submitted_at", "answered_at")
    list_filter = ("outcome",)
    list_select_related = ("task",)
    search_fields = ("ember_job_id", "task__id")
    search_help_text = "Ember job id or task id."
