"""Template tags for the admin's pages."""

from typing import Any

from django import template

from studio.models import ScrubReport, WorkerHeartbeat

register = template.Library()


@register.inclusion_tag("admin/studio/worker_status.html")
def worker_status() -> dict[str, Any]:
    """Show whether a worker is running, so a person knows why tasks wait."""
    return {"worker_status": WorkerHeartbeat.status()}


@register.inclusion_tag("admin/studio/scrub_status.html")
def scrub_status() -> dict[str, Any]:
    """Show how the last scrub of the originals went (`manage.py check_originals`)."""
    last = ScrubReport.objects.first()
    return {"scrub_status": ScrubReport.status(), "passed": last is not None and last.passed}
