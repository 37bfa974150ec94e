"""`/metrics`: every process's counters and the database's figures, for Prometheus.

Who may scrape (docs/operations.md §Metrics): with `AVATARS_METRICS_TOKEN` set, a
request bearing that token; unset, a loopback client that no proxy forwarded.
"""

import glob
import hmac
import ipaddress
import logging
import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from studio import (
    metrics,  # noqa: F401  (checks the multiprocess mode is on)
    worker_seen,
)
from studio.models import Task, TaskState, WorkerHeartbeat

log = logging.getLogger("studio.metrics")

# Headers a proxy adds: a request carrying one came from elsewhere, whatever its address.
FORWARDED = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")
UNAUTHORIZED = "Scraping /metrics needs the bearer token in AVATARS_METRICS_TOKEN.\n"
FORBIDDEN = "Without AVATARS_METRICS_TOKEN, /metrics answers loopback clients only.\n"


@require_safe
def scrape(request: HttpRequest) -> HttpResponse:
    """Answer Prometheus with the figures, or 401/403 to anyone not allowed to see them."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    body, content_type = exposition(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)


def exposition(accept: str = "") -> tuple[bytes, str]:
    """Return the figures of this machine's processes and of the database, and their type.

    The format is the one `accept` asks for (OpenMetrics, or Prometheus' text format).
    """
    registry = CollectorRegistry()
    ProcessFiles(registry, path=str(settings.AVATARS_METRICS_DIR))
    registry.register(StudioCollector())
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


class ProcessFiles(MultiProcessCollector):
    """The processes' figure files, summed; one that cannot be read is left out, and logged.

    A process killed while creating its file leaves it empty or cut short, and a
    starting worker may delete a dead process's file between the listing and the
    reading: either would otherwise fail every scrape until someone removed it.
    """

    def collect(self) -> Any:
        files = sorted(glob.glob(os.path.join(self._path, "*.db")))
        try:
            return self.merge(files, accumulate=True)
        except Exception:  # prometheus_client raises whatever its parsing hits
            readable = [path for path in files if _readable(path)]
            return self.merge(readable, accumulate=True)


def _readable(path: str) -> bool:
    """Say whether a figure file reads whole; log the one that does not."""
    try:
        list(MmapedDict.read_all_values_from_file(path))
    except FileNotFoundError:
        return False  # deleted meanwhile: a dead process's, nothing to say
    except Exception as exc:  # an empty or cut file fails in many ways
        log.warning("metrics file %s cannot be read (%s); left out of the scrape", path, exc)
        return False
    return True


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token = settings.AVATARS_METRICS_TOKEN
    if token:
        scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(offered.encode(), token.encode()):
            return None
        response = HttpResponse(UNAUTHORIZED, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _from_loopback(request):
        return None
    return HttpResponse(FORBIDDEN, status=403, content_type="text/plain")


def _from_loopback(request: HttpRequest) -> bool:
    """Say whether the client is this machine itself, and not a visitor a proxy passed on.

    Behind a TLS proxy (`AVATARS_BEHIND_TLS_PROXY`) every visitor arrives from the
    proxy, often over loopback, and not every proxy says so in a header: only the
    token opens /metrics there.
    """
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None):
        return False
    if any(header in request.META for header in FORWARDED):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


class StudioCollector(Collector):
    """The figures the database knows, read at each scrape with a few cheap queries."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            figures = _database_figures()
        except DatabaseError as exc:
            log.warning("metrics: the database did not answer: %s", exc)
            yield _gauge("avatars_database_up", "Whether the database answered this scrape.", 0)
            return
        yield _gauge("avatars_database_up", "Whether the database answered this scrape.", 1)
        by_state = figures["by_state"]
        tasks = GaugeMetricFamily("avatars_tasks", "Tasks by state.", labels=["state"])
        for state in TaskState:
            tasks.add_metric([state.value], by_state.get(state.value, 0))
        yield tasks
        yield _gauge(
            "avatars_copies_failed",
            "Tasks whose original Ember made could not be copied (state copy_failed).",
            by_state.get(TaskState.COPY_FAILED.value, 0),
        )
        yield _gauge(
            "avatars_releases_unconfirmed",
            "Tasks whose release of Ember's protected original was not confirmed.",
            figures["unconfirmed"],
        )
        yield _gauge(
            "avatars_oldest_due_task_age_seconds",
            "How long the longest-waiting due task has waited for the worker (0: none due).",
            figures["oldest_due"],
        )
        if figures["heartbeat"] is not None:
            yield _gauge(
                "avatars_worker_heartbeat_age_seconds",
                "Seconds since the worker last wrote its heartbeat.",
                figures["heartbeat"],
            )
        # Reads still answer on a full disk (database_up 1): a worker whose every write is
        # refused showed only as an ageing heartbeat, like a worker stopped (a review).
        stale = figures["heartbeat"] is None or figures["heartbeat"] > worker_seen.STALE_AFTER
        yield _gauge(
            "avatars_worker_cannot_write",
            "1 while the worker runs (it touches its file in the data dir) but its heartbeat "
            "row is not written: the database refuses its writes (a full disk).",
            int(stale and worker_seen.alive_on_disk(timezone.now())),
        )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _database_figures() -> dict[str, Any]:
    """Read the figures: counts by state (an index), one min over the due index, one row."""
    now = timezone.now()
    counts = Task.objects.order_by().values("state").annotate(n=Count("pk"))
    by_state = {row["state"]: row["n"] for row in counts}
    unconfirmed = Task.objects.filter(protection_released=False).count()
    oldest = Task.objects.due(now).order_by().aggregate(oldest=Min("next_attempt_at"))["oldest"]
    beat = WorkerHeartbeat.objects.filter(pk=1).values_list("seen_at", flat=True).first()
    return {
        "by_state": by_state,
        "unconfirmed": unconfirmed,
        "oldest_due": (now - oldest).total_seconds() if oldest else 0.0,
        "heartbeat": (now - beat).total_seconds() if beat else None,
    }
