"""The batch page while tasks wait: what the rows waiting their turn say, and the notes of
Ember away and of the worker stopped."""

import re

import pytest
from django.test import Client
from django.utils import timezone

from studio.models import Task, TaskState, WorkerHeartbeat
from studio.store import move, update
from tests.factories import a_batch
from tests.studio_pages import text

pytestmark = pytest.mark.django_db


def running_worker() -> WorkerHeartbeat:
    """A worker's heartbeat, just written: the page says "Worker running"."""
    now = timezone.now()
    return WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")


def turn_of(body: str, task: Task) -> str | None:
    """Return what a queued row waiting its turn says it waits for (None: no such words)."""
    found = re.search(rf'<span id="task-{task.pk}-turn"[^>]*>([^<]*)</span>', body)
    return found and found.group(1)


def test_a_row_waiting_its_turn_says_what_it_waits_for_now(signed_in: Client, subject):
    """Found by a review: with Ember away mid-batch, the rows not yet sent said "Waiting for
    the worker" under "Worker running". They say what they wait for as the page sees it, and
    each poll swaps those words alone when they change, without the rows."""
    batch = a_batch(subject, candidates=3)
    waiting, polled, _third = batch.tasks.order_by("ordinal")
    beat = running_worker()
    move(polled, TaskState.RUNNING, ember_job_id="job_1")
    page, poll = f"/batches/{batch.pk}/", f"/batches/{batch.pk}/progress/"
    seen = ".".join(str(t.version) for t in batch.in_form_order(list(batch.tasks.all())))

    def polled_now(shown: str) -> str:
        asked = {"seen": seen, "turn": shown}
        return signed_in.get(poll, asked, HTTP_HX_REQUEST="true").content.decode()

    assert turn_of(signed_in.get(page).content.decode(), waiting) == "Waiting its turn"
    assert turn_of(polled_now("turn"), waiting) is None  # nothing changed: nothing sent

    # Ember away: the running task's poll could not reach it (as the worker writes it).
    Task.objects.filter(pk=polled.pk).update(phase="Ember could not be reached; still polling")
    assert turn_of(polled_now("turn"), waiting) == "Waiting for Ember"
    assert f'<tr id="task-{waiting.pk}"' not in polled_now("turn")  # the row stays put

    WorkerHeartbeat.objects.filter(pk=beat.pk).update(stopped=True)
    assert turn_of(polled_now("ember"), waiting) == "Waiting for the worker"
    assert Task.objects.get(pk=waiting.pk).phase == "Waiting for the worker"  # for the API


def test_the_summary_says_when_ember_cannot_be_reached(signed_in: Client, subject):
    """Found by a browser review: with Ember down the summary said "6 in progress · Worker
    running"; only the rows, a thousand pixels down on a phone, said Ember was away."""
    batch = a_batch(subject, candidates=2)
    beat = running_worker()
    first = move(batch.tasks.get(ordinal=1), TaskState.RUNNING, ember_job_id="job_1")
    update(first, phase="Ember could not be reached; still polling")
    away = text(signed_in.get(f"/batches/{batch.pk}/"))
    update(Task.objects.get(pk=first.pk), phase="Waiting for Ember")

    assert "Ember cannot be reached just now. Avatars keeps trying by itself" in away
    assert "Ember cannot be reached" not in text(signed_in.get(f"/batches/{batch.pk}/"))
    # Not while no worker runs: "keeps trying by itself" under "nothing here moves until it
    # runs again" (a review); the worker's own note says what matters then.
    update(Task.objects.get(pk=first.pk), phase="Ember could not be reached; still polling")
    WorkerHeartbeat.objects.filter(pk=beat.pk).update(stopped=True)
    stopped = text(signed_in.get(f"/batches/{batch.pk}/"))
    assert "nothing here moves until it runs again" in stopped
    assert "Ember cannot be reached just now" not in stopped
