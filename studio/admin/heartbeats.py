"""The worker's heartbeat row, to look at (the index shows its status too)."""

from django.contrib import admin

from studio.admin.base import RecordAdmin
from studio.models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(RecordAdmin):
    list_display = ("pid", "host", "started_at", "seen_at", "status")

    @admin.display(description="status")
    def status(self, beat: WorkerHeartbeat) -> str:
        return WorkerHeartbeat.status()
