"""The worker's pump: its tasks side by side, its limit, its heartbeat (docs/design.md §6.4)."""

import os
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.utils import timezone

from studio.models import Task, TaskState
from studio.worker import (
    Worker,
)
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db


# --- the pump ---------------------------------------------------------------------------


def test_it_keeps_pumping_when_one_task_raises(subject, ember, worker, monkeypatch):
    FakeEmber(ember)
    [bad, good] = plan(subject, candidates=2)
    real = Worker.load_references

    async def explode(self, task):
        if task.pk == bad.pk:
            raise RuntimeError("disk on fire")
        return await real(self, task)

    monkeypatch.setattr(Worker, "load_references", explode)

    drain(worker)

    bad.refresh_from_db()
    good.refresh_from_db()
    assert good.state == TaskState.DONE
    assert bad.state == TaskState.QUEUED
    assert "disk on fire" in bad.error
    assert bad.next_attempt_at > timezone.now()  # not retried in a tight loop


def test_it_drives_no_more_than_its_limit_at_once(subject, ember):
    FakeEmber(ember)
    plan(subject, candidates=5)
    worker = Worker(workers=2, poll_interval=0, tick=0)

    async def one_pass() -> tuple[int, int]:
        started = await worker.pump()
        in_hand = len(worker.in_hand)
        worker.request_stop()
        await worker._drain()
        return started, in_hand

    assert async_to_sync(one_pass)() == (2, 2)


def test_the_pumps_query_uses_the_active_states_index(subject, worker):
    [task, *_] = plan(subject, candidates=3)
    # A history of finished tasks, so a planner that counts rows prefers the index.
    Task.objects.bulk_create(
        Task(
            batch_id=task.batch_id,
            state=TaskState.DONE,
            provider="openai",
            provider_label="x",
            frame="image",
            ordinal=n,
            prompt="p",
            next_attempt_at=None,
        )
        for n in range(2000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    plan_text = worker._due_query(timezone.now()).explain()
    assert "task_due_idx" in plan_text
    if connection.vendor == "sqlite":
        assert "SCAN" not in plan_text


def test_it_records_a_heartbeat_so_people_know_a_worker_is_running(subject, ember, worker):
    from studio.models import WorkerHeartbeat

    assert WorkerHeartbeat.status() == "no worker seen yet"
    drain(worker)
    # The beats got through; the clean stop at the end of the drain marked the row.
    assert WorkerHeartbeat.status().startswith("worker stopped for ")
    WorkerHeartbeat.objects.update(stopped=False, seen_at=timezone.now())
    assert WorkerHeartbeat.status() == "worker running"
    # A worker killed mid-run marks nothing: its last beat goes stale, and its file's time.
    WorkerHeartbeat.objects.update(seen_at=timezone.now() - timedelta(minutes=5))
    five_minutes_ago = time.time() - 300
    os.utime(settings.AVATARS_DATA_DIR / WorkerHeartbeat.ALIVE_FILE, (five_minutes_ago,) * 2)
    assert WorkerHeartbeat.status().startswith("no worker seen for ")
