"""The worker sending a task and every answer to a submit (docs/design.md §6.5)."""

import asyncio
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import originals
from studio.models import Asset, Attempt, Kind, TaskState
from studio.store import move
from studio.worker import (
    MAY_HAVE_REACHED,
    RECONCILE_PHASE,
    Worker,
)
from tests.factories import drain, plan
from tests.fake_ember import JOBS, FakeEmber
from tests.worker_drive import (
    submit_once,
)

pytestmark = pytest.mark.django_db


# --- the happy path -------------------------------------------------------------


def test_it_takes_an_image_from_queued_to_done_with_its_original_on_disk(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert task.phase == "Complete"
    assert task.protection_released is True
    asset = Asset.objects.get(task=task)
    assert task.asset == asset
    assert asset.ember_history_id == "hist_1"
    assert asset.ember_image_id == "img_1"
    assert originals.path_for(asset.sha256, ".png").read_bytes() == fake.images["img_1"]
    assert list(asset.subjects.all()) == [subject]
    assert [(a.number, a.ember_job_id, a.outcome) for a in task.attempts.all()] == [
        (1, "job_1", "accepted")
    ]
    assert fake.charges(str(task.pk)) == 1
    assert fake.release_route.call_count == 1


def test_it_sends_every_source_metadata_field_and_never_the_synchronous_door(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=("headshot",))

    drain(worker)

    [body] = fake.submits
    assert body["source_metadata"] == {
        "source_app": "cwkAvatars",
        "purpose": "exploration",
        "batch_id": str(task.batch_id),
        "task_id": str(task.pk),
        "attempt": 1,
        "subjects": [str(subject.pk)],
        "frame": "headshot",
        "candidate": 1,
    }
    assert body["kind"] == "image"
    assert body["provider"] == "openai"
    assert body["prompt"] == "a friendly portrait, watercolour"
    [ref] = body["references"]
    assert ref["sha256"] == task.references[0]["sha256"]
    assert ref["data"]  # the reference photo's bytes travel with the job
    assert fake.generate_route.call_count == 0


def test_it_sends_a_clip_with_its_idempotency_key(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=("clip",))

    drain(worker)

    task.refresh_from_db()
    assert task.kind == Kind.CLIP and task.state == TaskState.DONE
    assert fake.submit_headers[0]["Idempotency-Key"] == task.idempotency_key


# --- submit outcomes (docs/ember.md) -------------------------------------------------------


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_records_running_with_the_job_and_an_attempt_on_202(subject, ember, worker, frame):
    FakeEmber(ember)
    [task] = plan(subject, frames=(frame,))

    task = submit_once(worker, task)

    assert task.state == TaskState.RUNNING
    assert task.ember_job_id == "job_1"
    assert task.submitted_at is not None
    [attempt] = task.attempts.all()
    assert (attempt.number, attempt.ember_job_id, attempt.outcome) == (1, "job_1", "accepted")


@pytest.mark.parametrize("frame", ["image", "clip"])
@pytest.mark.parametrize("error", [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow")])
def test_it_requeues_with_back_off_when_nothing_reached_ember(subject, ember, worker, frame, error):
    ember.post(JOBS).mock(side_effect=error)
    [task] = plan(subject, frames=(frame,))

    task = submit_once(worker, task)

    assert task.state == TaskState.QUEUED
    assert task.next_attempt_at > timezone.now()
    assert "could not be reached" in task.phase
    assert task.attempts.count() == 0


@pytest.mark.parametrize("frame", ["image", "clip"])
@pytest.mark.parametrize("status", [429, 503])
def test_it_requeues_until_retry_after_when_ember_is_busy(subject, ember, worker, frame, status):
    ember.post(JOBS).mock(
        return_value=httpx.Response(
            status, headers={"Retry-After": "120"}, json={"error": {"code": "busy", "message": "x"}}
        )
    )
    [task] = plan(subject, frames=(frame,))

    task = submit_once(worker, task)

    assert task.state == TaskState.QUEUED
    wait = (task.next_attempt_at - timezone.now()).total_seconds()
    assert 110 < wait <= 120
    # Stored text names no countdown: "trying again in 120 s" was read for minutes after;
    # the batch page says how long is left from next_attempt_at as it renders the row.
    assert task.phase == "Ember is busy; will try again"
    assert task.attempts.count() == 0


def run_for(worker: Worker, seconds: float) -> None:
    """Run the worker as `run_worker` does (not `--once`), then ask it to stop."""

    async def go() -> None:
        asyncio.get_running_loop().call_later(seconds, worker.request_stop)
        await worker.run()

    worker.lock()
    try:
        async_to_sync(go)()
    finally:
        worker.unlock()


def test_it_waits_at_least_a_second_when_ember_says_retry_after_zero(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.submit_route.mock(
        return_value=httpx.Response(
            429, headers={"Retry-After": "0"}, json={"error": {"code": "busy", "message": "x"}}
        )
    )
    [task] = plan(subject)

    run_for(worker, 0.5)

    sent = fake.submit_route.call_count
    assert sent == 1, f"Ember saw {sent} submits for one task in 0.5 s"
    task.refresh_from_db()
    assert task.state == TaskState.QUEUED
    assert task.next_attempt_at > timezone.now()


@pytest.mark.parametrize("frame", ["image", "clip"])
@pytest.mark.parametrize("status", [401, 403])
def test_it_requeues_with_a_long_back_off_when_credentials_are_refused(
    subject, ember, worker, frame, status
):
    ember.post(JOBS).mock(
        return_value=httpx.Response(status, json={"error": {"code": "auth", "message": "bad"}})
    )
    [task] = plan(subject, frames=(frame,))

    task = submit_once(worker, task)

    assert task.state == TaskState.QUEUED
    assert (task.next_attempt_at - timezone.now()).total_seconds() > 200
    assert "credentials" in task.phase


@pytest.mark.parametrize("frame", ["image", "clip"])
@pytest.mark.parametrize("status", [400, 422])
def test_it_fails_with_embers_message_on_another_4xx(subject, ember, worker, frame, status):
    ember.post(JOBS).mock(
        return_value=httpx.Response(
            status, json={"error": {"code": "invalid", "message": "Prompt too spicy."}}
        )
    )
    [task] = plan(subject, frames=(frame,))

    task = submit_once(worker, task)

    assert task.state == TaskState.FAILED
    assert task.error == "Prompt too spicy."
    assert task.next_attempt_at is None


UNKNOWN_OUTCOMES = [
    httpx.Response(500),
    httpx.Response(502),
    httpx.Response(504),
    httpx.ReadTimeout("no answer"),
    httpx.RemoteProtocolError("Server disconnected without sending a response."),
]


@pytest.mark.parametrize("outcome", UNKNOWN_OUTCOMES, ids=["500", "502", "504", "read", "drop"])
def test_it_marks_an_image_uncertain_when_the_submit_may_have_arrived(
    subject, ember, worker, outcome
):
    route = ember.post(JOBS)
    route.mock(side_effect=outcome) if isinstance(outcome, Exception) else route.mock(
        return_value=outcome
    )
    [task] = plan(subject)

    task = submit_once(worker, task)
    drain(worker)  # and the worker never sends it again on its own

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.phase == RECONCILE_PHASE
    assert task.error.startswith(MAY_HAVE_REACHED)
    assert route.call_count == 1
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]


@pytest.mark.parametrize("outcome", UNKNOWN_OUTCOMES, ids=["500", "502", "504", "read", "drop"])
def test_it_resends_a_clip_under_the_same_key_when_the_submit_may_have_arrived(
    subject, ember, worker, outcome
):
    fake = FakeEmber(ember)
    first = True

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal first
        response = fake._submit(request)  # Ember took the job (and charged it) ...
        if first:
            first = False
            if isinstance(outcome, Exception):
                raise outcome  # ... but the answer was lost
            return outcome
        return response

    fake.submit_route.mock(side_effect=flaky)
    [task] = plan(subject, frames=("clip",))

    task = submit_once(worker, task)
    assert task.state == TaskState.QUEUED
    move(task, TaskState.QUEUED)  # due now, instead of after the short back-off
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    keys = [h["Idempotency-Key"] for h in fake.submit_headers]
    assert keys == [task.idempotency_key, task.idempotency_key]
    assert fake.charges(str(task.pk)) == 1
    assert task.attempts.count() == 1


# --- the order of sending -----------------------------------------------------------------


def test_it_sends_a_batchs_tasks_in_the_order_its_page_lists_them(subject, ember, worker):
    """All of a batch is due at once; the worker still takes it as the page reads, top down.

    The due query orders by `next_attempt_at` alone: without a tie-break written at planning,
    PostgreSQL hands equal rows back in any order (its random ids decide), so a person sees
    the last row of a batch start first.
    """
    FakeEmber(ember)
    tasks = plan(subject, candidates=3, providers=("flux", "openai"), frames=("headshot", "image"))
    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    batch = tasks[0].batch
    listed = batch.in_form_order(list(batch.tasks.all()))
    sent = [task.ember_job_id for task in listed]
    assert sent == [f"job_{n}" for n in range(1, len(listed) + 1)], (
        f"Ember's job numbers in the page's order: {sent}"
    )


@pytest.mark.parametrize(
    ("first_sent", "least", "most"), [(0, 1.5, 2.5), (200, 45, 55), (1500, 59, 61)]
)
def test_a_clip_whose_answers_keep_getting_lost_is_resent_less_and_less_often(
    subject, ember, worker, first_sent, least, most
):
    """Found by a review: 41 clips whose answers were lost each time were re-sent every
    6.5 s, 3,358 free replays in nine minutes, each carrying its reference photos. The wait
    grows with the time since the key was first sent (a quarter of it), up to a minute."""
    fake = FakeEmber(ember)

    def lost(request: httpx.Request) -> httpx.Response:
        fake._submit(request)  # Ember has the job (charged once under the key) ...
        raise httpx.ReadError("... and its answer is lost, every time")

    fake.submit_route.mock(side_effect=lost)
    [task] = plan(subject, frames=("clip",))
    task = submit_once(worker, task)  # its key's first send
    since = timezone.now() - timedelta(seconds=first_sent)
    Attempt.objects.filter(task=task).update(submitted_at=since)
    move(task, TaskState.QUEUED, due=timezone.now())

    task = submit_once(worker, task.__class__.objects.get(pk=task.pk))  # lost again

    wait = (task.next_attempt_at - timezone.now()).total_seconds()
    assert task.state == TaskState.QUEUED, task.phase
    assert least <= wait <= most, f"re-sent in {wait:.1f} s, {first_sent} s after its first send"
    assert fake.charges(str(task.pk)) == 1
