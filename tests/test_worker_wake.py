"""The worker waking what a dead worker left, and cancels racing it (docs/design.md §6.2)."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from studio import engine, originals
from studio.models import Attempt, Task, TaskState
from studio.store import move
from studio.worker import (
    Worker,
    steps,
    transitions,
)
from tests.factories import drain, plan
from tests.fake_ember import JOBS, FakeEmber, seen
from tests.worker_drive import assert_sent_once_under_its_key, fake_submit

pytestmark = pytest.mark.django_db


# --- the wake-up table ------------------------------------------------------------


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_wakes_preparing_back_to_queued(subject, ember, worker, frame):
    [task] = plan(subject, frames=(frame,))
    move(task, TaskState.PREPARING)

    worker.recover()

    task.refresh_from_db()
    assert task.state == TaskState.QUEUED
    assert task.next_attempt_at is not None


def test_it_wakes_a_submitting_image_as_uncertain_and_never_resends_it(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now())

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.phase == "Reconcile before retry"
    assert task.error == (
        "The previous submit may have reached Ember. Check history before submitting again."
    )
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]
    assert fake.submits == []


def test_it_wakes_a_submitting_clip_to_queued_and_resends_it_under_the_same_key(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=("clip",))
    key = task.idempotency_key
    # The first submit reached Ember; the worker died before writing `running`.
    async_to_sync(worker.client.submit)(
        {"source_metadata": {"task_id": str(task.pk)}, "provider": "openai", "model": None},
        idempotency_key=key,
    )
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now())

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert [h["Idempotency-Key"] for h in fake.submit_headers] == [key, key]
    assert fake.charges(str(task.pk)) == 1
    assert task.ember_job_id == "job_1"
    assert task.attempts.count() == 1


def test_it_records_a_woken_clips_send_so_it_can_no_longer_be_cancelled(subject, ember, worker):
    [task] = plan(subject, frames=("clip",))
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now())

    worker.recover()

    task.refresh_from_db()
    assert task.state == TaskState.QUEUED
    assert_sent_once_under_its_key(task)
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED


def test_it_wakes_running_by_polling_the_recorded_job_without_submitting(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    async_to_sync(fake_submit)(worker, task)
    move(task, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert len(fake.submits) == 1  # only the one made before the "crash"
    assert fake.poll_route.called


def test_it_wakes_copying_by_finishing_from_the_saved_answer(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    async_to_sync(fake_submit)(worker, task)
    move(task, TaskState.COPYING, ember_job_id="job_1", result=fake.jobs["job_1"]["result"])

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert len(fake.submits) == 1
    assert not fake.poll_route.called
    assert fake.file_route.call_count == 1


# --- cancel racing the worker ---------------------------------------------------------


def test_it_loses_the_race_to_a_cancel_during_preparation_and_sends_nothing(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)

    class CancelledWhilePreparing(Worker):
        async def load_references(self, task):
            # A person cancels while the worker is reading the references.
            from asgiref.sync import sync_to_async

            def cancel() -> None:
                engine.cancel_task(task=Task.objects.get(pk=task.pk))

            await sync_to_async(cancel)()
            return await super().load_references(task)

    racing = CancelledWhilePreparing(client=worker.client, poll_interval=0, tick=0)
    drain(racing)

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert fake.submits == []


def cancel_before_the_worker_writes(monkeypatch, *, source: TaskState, target: TaskState) -> None:
    """A person's cancel commits between the worker's read of a task and its write.

    The worker's `move` from `source` to `target` first lets the cancel land on the
    row, then writes from the copy the worker read (with that copy's version).
    """
    real = transitions.move

    def racing(task: Task, state: TaskState, **fields):
        if task.state == source and state == target:
            engine.cancel_task(task=Task.objects.get(pk=task.pk))
        return real(task, state, **fields)

    for module in (steps, transitions):  # every worker module that moves a task
        monkeypatch.setattr(module, "move", racing)


def test_it_keeps_a_cancel_that_won_against_the_wake_up_and_sends_nothing(
    subject, ember, worker, monkeypatch
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    move(task, TaskState.PREPARING)  # a dead worker was checking its references
    cancel_before_the_worker_writes(
        monkeypatch, source=TaskState.PREPARING, target=TaskState.QUEUED
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert fake.submits == []


def test_it_keeps_a_cancel_that_won_against_parking_a_failed_step_and_sends_nothing(
    subject, ember, worker, monkeypatch
):
    fake = FakeEmber(ember)
    [task] = plan(subject)

    async def explode(self, task):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Worker, "load_references", explode)
    cancel_before_the_worker_writes(
        monkeypatch, source=TaskState.PREPARING, target=TaskState.QUEUED
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert fake.submits == []


def test_it_keeps_a_cancel_that_won_while_a_changed_reference_was_read(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    ref = task.references[0]
    originals.path_for(ref["sha256"], ".png").write_bytes(b"someone edited this photo")

    class CancelledWhilePreparing(Worker):
        async def load_references(self, task):
            await sync_to_async(engine.cancel_task)(
                task=await sync_to_async(Task.objects.get)(pk=task.pk)
            )
            return await super().load_references(task)

    drain(CancelledWhilePreparing(client=worker.client, poll_interval=0, tick=0))

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert task.error == "Cancelled before anything was sent to Ember."
    assert fake.submits == []


def test_it_cannot_cancel_a_task_once_it_is_submitting(subject, ember, worker):
    [task] = plan(subject)
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now())

    with pytest.raises(engine.TooLate):
        engine.cancel_task(task=task)
    task.refresh_from_db()
    assert task.state == TaskState.SUBMITTING


def test_it_finishes_from_a_saved_answer_whose_history_is_not_an_object(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    async_to_sync(fake_submit)(worker, task)
    result = {**fake.jobs["job_1"]["result"], "history": "hist_1"}
    move(task, TaskState.COPYING, ember_job_id="job_1", result=result)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING, task.error
    assert task.asset is not None and task.asset.ember_history_id == ""
    assert fake.file_route.call_count == 1


@pytest.mark.django_db(transaction=True)
def test_a_task_whose_settling_fails_does_not_keep_the_others_stranded(monkeypatch, subject):
    """Found by a review: the sweep stopped at the first task whose write failed, so every
    task after it stayed mid-step, where nothing else moves it."""
    from django.db import DatabaseError

    from studio.worker import transitions

    first, second = plan(subject, candidates=2)
    for task in (first, second):
        move(task, TaskState.PREPARING)
    real = transitions._wake

    def fails_for_the_first(task, **kwargs):
        if task.pk == first.pk:
            raise DatabaseError("the disk refused this one")
        return real(task, **kwargs)

    monkeypatch.setattr(transitions, "_wake", fails_for_the_first)

    counts = transitions._wake_stranded(in_hand=[], answers={}, unsettled=set())

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == (TaskState.PREPARING, TaskState.QUEUED)
    assert counts == {"preparing": 1, "submitting": 0}


def test_a_restarted_worker_collects_the_jobs_ember_took_before_sending_new_ones(
    subject, ember, worker
):
    """Found by a review's own Ember (a worker killed with four jobs running, 36 queued):
    the restarted worker sent all 36, paid, before polling the four Ember had finished 30 s
    earlier, whose rows said "Ember is generating" meanwhile. Queued tasks are due from their
    planning, before any job sent since; at start the jobs Ember took go first."""
    fake = FakeEmber(ember)
    tasks = plan(subject, candidates=4)
    for task in tasks[2:]:  # the last two were sent by the worker that died
        async_to_sync(fake_submit)(worker, task)
    sent = [f"job_{n}" for n in (1, 2)]
    for task, job in zip(tasks[2:], sent, strict=True):
        move(task, TaskState.RUNNING, ember_job_id=job, submitted_at=timezone.now())
    worker.workers = 1  # one slot: the order the pump takes them in is the order of requests
    before = len(seen(ember))

    drain(worker)

    asked = seen(ember)[before:]
    polls = [asked.index(f"GET {JOBS}/{job}") for job in sent]
    first_send = asked.index(f"POST {JOBS}")
    assert max(polls) < first_send, f"Ember was asked, in order: {asked}"
    assert all(t.state == TaskState.DONE for t in Task.objects.filter(pk__in=[t.pk for t in tasks]))
    assert len(fake.submits) == 4, "each task sent once"
