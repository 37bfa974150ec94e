"""The worker's heartbeat as people read it: running, stopped cleanly, or gone quiet."""

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from studio.models import ScrubReport, WorkerHeartbeat
from studio.worker.heartbeat import beat, record_stop
from tests.admin_pages import text

# The worker's database thread runs on its own connection: real commits, no test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_admin_says_the_worker_stopped_as_soon_as_it_stops_cleanly(admin_client):
    """Found by a review: "Worker running" for 15 s after run_worker had stopped."""
    call_command("run_worker", "--once", stdout=io.StringIO())

    page = text(admin_client.get(reverse("admin:index")))

    assert "Worker running" not in page
    assert "Worker stopped for " in page, page
    assert "Worker: worker" not in page, "the status is not prefixed with its own first word"
    beat = WorkerHeartbeat.objects.get()
    assert f"(since {beat.seen_at:%Y-%m-%d %H:%M:%S} UTC)" in page


def test_a_worker_that_starts_again_after_a_clean_stop_shows_running(admin_client):
    call_command("run_worker", "--once", stdout=io.StringIO())

    beat(timezone.now())  # what the next worker writes every few seconds

    assert "Worker running" in text(admin_client.get(reverse("admin:index")))


def test_a_worker_that_went_quiet_without_stopping_still_goes_stale(admin_client):
    """A killed worker records nothing: its last beat goes stale after STALE_AFTER seconds."""
    seen = timezone.now() - timedelta(seconds=WorkerHeartbeat.STALE_AFTER + 5)
    WorkerHeartbeat.objects.create(started_at=seen, seen_at=seen, pid=42, host="box")

    page = text(admin_client.get(reverse("admin:index")))

    assert "No worker seen for 2" in page, page


def test_a_stopping_worker_leaves_a_row_another_worker_wrote_as_it_was():
    """A worker that lost its lock marks its heartbeat stopped as it goes; by then a new
    owner (another process, maybe another machine) may be beating in the same row."""
    seen = timezone.now()
    WorkerHeartbeat.objects.create(started_at=seen, seen_at=seen, pid=42, host="elsewhere")

    record_stop()

    row = WorkerHeartbeat.objects.get()
    assert (row.pid, row.host, row.stopped, row.seen_at) == (42, "elsewhere", False, seen)
    assert WorkerHeartbeat.status() == "worker running"


def test_a_stopping_worker_marks_its_own_row_stopped():
    beat(timezone.now())

    record_stop()

    assert WorkerHeartbeat.objects.get().stopped is True
    assert WorkerHeartbeat.status().startswith("worker stopped for ")


def test_the_worker_and_the_scrub_say_their_times_in_the_studios_zone(settings, db):
    """The batch page said "Worker stopped … (since 02:28:23 UTC)" beside times the studio
    shows in its own zone (`AVATARS_TIME_ZONE`): both now say them there, and name it."""
    settings.TIME_ZONE = "Europe/Paris"
    at = datetime(2026, 12, 6, 1, 28, 23, tzinfo=UTC)  # 02:28:23 in Paris, in winter
    WorkerHeartbeat.objects.create(started_at=at, seen_at=at, pid=1, host="h", stopped=True)
    ScrubReport.objects.create(started_at=at, finished_at=at, checked=0, passed=True, summary="ok")

    assert "(since 2026-12-06 02:28:23 CET)" in WorkerHeartbeat.status()
    assert ScrubReport.status().startswith("last scrub 2026-12-06 02:28 CET: ")
