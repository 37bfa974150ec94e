"""Template tags for the admin's pages."""

from typing import Any

from django import template

from studio.models import WorkerHeartbeat

register = template.Library()


@register.inclusion_tag("admin/studio/worker_status.html")
def worker_status() -> dict[str, Any]:
    """Show whether a worker is running, so a person knows why tasks wait."""
    return {"worker_status": WorkerHeartbeat.status()}
