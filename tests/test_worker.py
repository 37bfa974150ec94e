"""The worker's steps, one at a time against a mocked Ember (docs/design.md §6)."""

import asyncio
import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import DatabaseError, connection, connections
from django.utils import timezone

from studio import engine, originals
from studio.models import Asset, Attempt, Kind, Task, TaskState
from studio.store import move
from studio.worker import (
    MAY_HAVE_REACHED,
    RECONCILE_PHASE,
    REFERENCE_CHANGED,
    Worker,
    steps,
    transitions,
)
from tests.factories import drain, plan, png_bytes
from tests.fake_ember import JOBS, FakeEmber, catch_strays, flood, seen

pytestmark = pytest.mark.django_db


def originals_on_disk() -> set[str]:
    folder = Path(settings.AVATARS_DATA_DIR) / "originals"
    return {p.name for p in folder.iterdir()}


def assert_sent_once_under_its_key(task: Task) -> Attempt:
    """Check the clip's send is one `unknown` attempt under its key and cannot be cancelled."""
    [attempt] = task.attempts.all()
    assert (attempt.outcome, attempt.ember_job_id, attempt.idempotency_key) == (
        Attempt.Outcome.UNKNOWN,
        "",
        task.idempotency_key,
    )
    with pytest.raises(engine.TooLate, match="already been sent to Ember"):
        engine.cancel_task(task=task)
    return attempt


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


async def fake_submit(worker: Worker, task: Task) -> None:
    """Make the submit a dead worker made before it could record it."""
    await worker.client.submit(
        {"source_metadata": {"task_id": str(task.pk)}, "provider": "openai", "model": None}
    )


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


# --- submit outcomes (docs/ember.md) -------------------------------------------------------


def submit_once(worker: Worker, task: Task) -> Task:
    async_to_sync(worker.submit)(task)
    task.refresh_from_db()
    return task


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


# --- whatever goes wrong on the submit path, the task does not stay `submitting` ------


def drive_once(worker: Worker, task: Task) -> Task:
    """Drive one task as the pump would, until it rests or waits."""
    async_to_sync(worker.drive)(str(task.pk))
    task.refresh_from_db()
    return task


def gzip_that_is_not(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        202, stream=httpx.ByteStream(b"not gzip at all"), headers={"Content-Encoding": "gzip"}
    )


UNDECODABLE_202S = {
    "a body that fails its content encoding": gzip_that_is_not,
    "JSON nested too deep to decode": lambda request: httpx.Response(202, text="[" * 100_000),
}


@pytest.mark.parametrize("answer", UNDECODABLE_202S.values(), ids=UNDECODABLE_202S.keys())
def test_it_marks_an_image_uncertain_at_once_when_a_202_cannot_be_decoded(
    subject, ember, worker, answer
):
    fake = FakeEmber(ember)
    fake.submit_route.mock(side_effect=answer)
    [task] = plan(subject)

    task = drive_once(worker, task)

    assert task.state == TaskState.UNCERTAIN
    assert task.phase == RECONCILE_PHASE
    assert task.error == MAY_HAVE_REACHED
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]
    assert fake.submit_route.call_count == 1


@pytest.mark.parametrize("answer", UNDECODABLE_202S.values(), ids=UNDECODABLE_202S.keys())
def test_it_requeues_a_clip_under_its_key_at_once_when_a_202_cannot_be_decoded(
    subject, ember, worker, answer
):
    fake = FakeEmber(ember)
    first = True

    def took_it_but_the_answer_is_broken(request: httpx.Request) -> httpx.Response:
        nonlocal first
        response = fake._submit(request)
        if first:
            first = False
            return answer(request)
        return response

    fake.submit_route.mock(side_effect=took_it_but_the_answer_is_broken)
    [task] = plan(subject, frames=("clip",))
    key = task.idempotency_key

    task = drive_once(worker, task)
    assert task.state == TaskState.QUEUED
    assert task.next_attempt_at is not None
    assert [(a.outcome, a.idempotency_key) for a in task.attempts.all()] == [
        (Attempt.Outcome.UNKNOWN, key)
    ]
    move(task, TaskState.QUEUED)  # due now rather than after the back-off
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert [h["Idempotency-Key"] for h in fake.submit_headers] == [key, key]
    assert fake.charges(str(task.pk)) == 1


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_requeues_with_a_back_off_when_retry_after_is_absurd(subject, ember, worker, frame):
    fake = FakeEmber(ember)
    fake.submit_route.mock(
        return_value=httpx.Response(
            429, headers={"Retry-After": "1e400"}, json={"error": {"code": "busy", "message": "x"}}
        )
    )
    [task] = plan(subject, frames=(frame,))

    task = drive_once(worker, task)

    assert task.state == TaskState.QUEUED
    wait = (task.next_attempt_at - timezone.now()).total_seconds()
    assert 3500 < wait <= 3600
    assert task.attempts.count() == 0


def database_error(*args, **kwargs):
    raise DatabaseError("disk I/O error")


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_logs_the_job_id_when_recording_an_accepted_submit_fails(
    subject, ember, worker, frame, monkeypatch, caplog
):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=(frame,))
    monkeypatch.setattr(steps, "_record_accepted", database_error)

    task = drive_once(worker, task)

    assert fake.submit_route.call_count == 1
    if frame == "image":
        assert task.state == TaskState.UNCERTAIN
        assert task.phase == RECONCILE_PHASE
        assert task.error == MAY_HAVE_REACHED
        [attempt] = task.attempts.all()
        assert attempt.outcome == Attempt.Outcome.UNKNOWN
        assert "job_1" in attempt.error  # a person finds the job from the task's history
    else:
        assert task.state == TaskState.QUEUED  # re-sent under its key: Ember replays job_1
        assert task.idempotency_key == fake.submit_headers[0]["Idempotency-Key"]
    [logged] = [
        r for r in caplog.records if r.levelno >= logging.ERROR and "job_1" in r.getMessage()
    ]
    assert str(task.pk) in logged.getMessage()


REFUSALS = {
    "429": httpx.Response(429, headers={"Retry-After": "5"}),
    "503": httpx.Response(503),
    "401": httpx.Response(401),
    "403": httpx.Response(403),
    "400": httpx.Response(400, json={"error": {"code": "invalid", "message": "no"}}),
    "refused": httpx.ConnectError("refused"),
}


@pytest.mark.parametrize("frame", ["image", "clip"])
@pytest.mark.parametrize("answer", REFUSALS.values(), ids=REFUSALS.keys())
def test_it_never_suspects_a_submit_ember_refused_when_recording_the_refusal_fails(
    subject, ember, worker, frame, answer, monkeypatch
):
    route = ember.post(JOBS)
    route.mock(side_effect=answer) if isinstance(answer, Exception) else route.mock(
        return_value=answer
    )
    [task] = plan(subject, frames=(frame,))
    monkeypatch.setattr(steps, "_record_refusal", database_error)

    task = drive_once(worker, task)

    assert task.state == TaskState.QUEUED
    assert task.next_attempt_at > timezone.now() + timedelta(seconds=5)
    assert task.attempts.count() == 0
    assert MAY_HAVE_REACHED not in task.error


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_repairs_a_task_left_submitting_while_the_worker_lives(
    subject, ember, worker, frame, monkeypatch
):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=(frame,))
    # The database refuses every write that would record Ember's answer, once.
    monkeypatch.setattr(steps, "_record_accepted", database_error)
    monkeypatch.setattr(steps, "_settle_unrecorded", database_error, raising=False)
    stuck = {}

    async def two_passes() -> None:
        await worker.pump()
        await asyncio.gather(*worker.in_hand.values(), return_exceptions=True)
        stuck["state"] = await sync_to_async(lambda: Task.objects.get(pk=task.pk).state)()
        monkeypatch.undo()  # the database is back
        worker.request_stop()  # start nothing new: this pass only sweeps
        await worker.pump()  # the next pass sweeps what no coroutine holds

    async_to_sync(two_passes)()

    assert stuck["state"] == TaskState.SUBMITTING

    task.refresh_from_db()
    if frame == "image":
        assert task.state == TaskState.UNCERTAIN
        assert task.error == MAY_HAVE_REACHED
        assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]
    else:
        assert task.state == TaskState.QUEUED
    assert fake.submit_route.call_count == 1


def test_the_sweep_leaves_alone_a_task_whose_coroutine_is_still_sending(subject, worker):
    [task] = plan(subject)
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now())

    async def sweep_while_in_hand() -> None:
        sending = asyncio.get_running_loop().create_future()
        worker.in_hand[str(task.pk)] = sending  # type: ignore[assignment]
        await worker.sweep()
        sending.cancel()

    async_to_sync(sweep_while_in_hand)()

    task.refresh_from_db()
    assert task.state == TaskState.SUBMITTING
    assert task.attempts.count() == 0


def test_it_repairs_a_task_left_preparing_while_the_worker_lives(
    subject, ember, worker, monkeypatch
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    real = Worker.load_references
    failures = iter([RuntimeError("disk on fire")])

    async def flaky(self, task):
        failure = next(failures, None)
        if failure:
            raise failure
        return await real(self, task)

    monkeypatch.setattr(Worker, "load_references", flaky)
    monkeypatch.setattr(steps, "_postpone", database_error)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.charges(str(task.pk)) == 1


def test_it_refuses_to_cancel_a_clip_whose_answer_was_lost_and_finishes_it_as_one_attempt(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    lost = iter([httpx.Response(502)])

    def lose_the_first_answer(request: httpx.Request) -> httpx.Response:
        response = fake._submit(request)  # Ember took the job and charged it ...
        return next(lost, response)  # ... but the first answer never arrived

    fake.submit_route.mock(side_effect=lose_the_first_answer)
    [task] = plan(subject, frames=("clip",))

    task = submit_once(worker, task)

    assert task.state == TaskState.QUEUED
    sent = assert_sent_once_under_its_key(task)

    move(task, TaskState.QUEUED)  # due now rather than after the back-off
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    [accepted] = task.attempts.all()
    assert (accepted.pk, accepted.number, accepted.outcome, accepted.ember_job_id) == (
        sent.pk,
        1,
        Attempt.Outcome.ACCEPTED,
        "job_1",
    )
    assert fake.charges(str(task.pk)) == 1
    assert [body["source_metadata"]["attempt"] for body in fake.submits] == [1, 1]


def test_it_counts_a_replayed_clip_recorded_before_attempts_carried_keys_once(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=("clip",))
    async_to_sync(worker.client.submit)(
        {"source_metadata": {"task_id": str(task.pk)}, "provider": "openai", "model": None},
        idempotency_key=task.idempotency_key,
    )
    Attempt.objects.create(  # as recorded before the upgrade: no key on the attempt
        task=task,
        number=1,
        ember_job_id="job_1",
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.ACCEPTED,
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    [attempt] = task.attempts.all()
    assert (attempt.ember_job_id, attempt.idempotency_key) == ("job_1", task.idempotency_key)
    assert fake.charges(str(task.pk)) == 1


def test_it_stops_re_sending_a_clip_once_its_key_was_first_sent_past_the_poll_bound(
    subject, ember, worker
):
    fake = FakeEmber(ember)

    def always_lost(request: httpx.Request) -> httpx.Response:
        fake._submit(request)
        return httpx.Response(502)

    fake.submit_route.mock(side_effect=always_lost)
    [task] = plan(subject, frames=("clip",))
    key = task.idempotency_key
    first_sent = timezone.now() - timedelta(hours=2)
    Attempt.objects.create(
        task=task,
        number=1,
        idempotency_key=key,
        submitted_at=first_sent,
        outcome=Attempt.Outcome.UNKNOWN,
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.next_attempt_at is None
    assert f"re-sent under key {key} since {first_sent:%Y-%m-%d %H:%M:%S} UTC" in task.error
    assert task.error.endswith("nothing more was sent.")
    assert fake.submits == []
    assert task.attempts.count() == 1


def test_it_re_sends_a_lost_clip_only_while_within_the_poll_bound(subject, ember, worker):
    fake = FakeEmber(ember)

    def always_lost(request: httpx.Request) -> httpx.Response:
        fake._submit(request)
        return httpx.Response(502)

    fake.submit_route.mock(side_effect=always_lost)
    [task] = plan(subject, frames=("clip",))
    hasty = Worker(client=worker.client, poll_interval=0, poll_bound=0.3, tick=0)

    for _ in range(20):  # 20 passes of at least 0.05 s: past the 0.3 s bound
        drain(hasty)
        task.refresh_from_db()
        if task.state != TaskState.QUEUED:
            break
        time.sleep(0.05)
        move(task, TaskState.QUEUED)  # due now rather than after the back-off

    assert task.state == TaskState.UNCERTAIN
    assert task.idempotency_key in task.error
    assert 1 <= len(fake.submits) < 20
    assert fake.charges(str(task.pk)) == 1


# --- running --------------------------------------------------------------------------


def test_it_fails_a_job_ember_failed_with_embers_message(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.poll_route.mock(
        return_value=httpx.Response(
            200,
            json={
                "id": "job_1",
                "status": "failed",
                "error": {"code": "content_policy", "message": "Refused by the provider."},
            },
        )
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert task.error == "Refused by the provider."


def test_it_polls_a_job_sent_long_before_a_worker_outage_and_finishes_it(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    async_to_sync(fake_submit)(worker, task)
    two_hours_ago = timezone.now() - timedelta(hours=2)
    move(task, TaskState.RUNNING, ember_job_id="job_1", submitted_at=two_hours_ago)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.poll_route.call_count == 1
    assert len(fake.submits) == 1


def test_it_polls_once_before_giving_up_on_a_job_past_the_bound(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.poll_route.mock(
        return_value=httpx.Response(200, json={"id": "job_1", "status": "running"})
    )
    [task] = plan(subject)
    async_to_sync(fake_submit)(worker, task)
    two_hours_ago = timezone.now() - timedelta(hours=2)
    move(task, TaskState.RUNNING, ember_job_id="job_1", submitted_at=two_hours_ago)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert "did not finish in time" in task.phase
    assert fake.poll_route.call_count == 1
    assert len(fake.submits) == 1


def test_it_keeps_polling_through_transient_errors(subject, ember, worker):
    fake = FakeEmber(ember)
    answers = iter(
        [
            httpx.Response(502),
            httpx.ConnectError("down"),
            httpx.Response(200, json={"id": "job_1", "status": "running"}),
        ]
    )

    def poll(request, job_id):
        answer = next(answers, None)
        if answer is None:
            return fake._poll(request, job_id)
        if isinstance(answer, Exception):
            raise answer
        return answer

    fake.poll_route.mock(side_effect=poll)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.poll_route.call_count == 4


def test_it_marks_a_job_ember_does_not_know_as_uncertain(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.poll_route.mock(
        return_value=httpx.Response(404, json={"error": {"code": "not_found", "message": "?"}})
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert len(fake.submits) == 1


# --- references -----------------------------------------------------------------------


def test_it_fails_a_task_whose_frozen_reference_changed_and_sends_nothing(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    ref = task.references[0]
    originals.path_for(ref["sha256"], ".png").write_bytes(b"someone edited this photo")

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert task.error == "A frozen reference failed its checksum."
    assert task.error == REFERENCE_CHANGED
    assert fake.submits == []


# --- finish: copy first, release last -------------------------------------------------


def committed_assets(sha: str, task_id) -> int:
    """Count the asset rows another connection can see: only committed ones."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM studio_asset WHERE sha256 = %s AND task_id = %s",
                [sha, task_id.hex if other.vendor == "sqlite" else task_id],
            )
            return cursor.fetchone()[0]
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_it_has_the_original_on_disk_and_its_row_committed_before_releasing(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    seen = {}

    def release(request, image_id):
        sha = fake.jobs["job_1"]["result"]["image"]["sha256"]
        seen["on_disk"] = originals.path_for(sha, ".png").is_file()
        # Another connection sees only committed rows (opened off the event loop's thread).
        with ThreadPoolExecutor(1) as pool:
            seen["rows"] = pool.submit(committed_assets, sha, task.pk).result()
        return httpx.Response(200, json={"protected": False})

    fake.release_route.mock(side_effect=release)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert seen == {"on_disk": True, "rows": 1}


@pytest.mark.parametrize(
    "failure", [httpx.Response(500), httpx.ConnectError("gone"), httpx.ReadTimeout("slow")]
)
@pytest.mark.parametrize("history", [True, False])
def test_it_finishes_with_protection_unconfirmed_when_the_release_fails(
    subject, ember, worker, failure, history
):
    fake = FakeEmber(ember, history=history)
    route = fake.release_route
    route.mock(side_effect=failure) if isinstance(failure, Exception) else route.mock(
        return_value=failure
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == (TaskState.DONE if history else TaskState.HISTORY_MISSING)
    assert task.protection_released is False
    assert Asset.objects.filter(task=task).exists()
    assert route.call_count == 1  # nothing retries a failed release on a timer


def test_it_records_history_missing_with_embers_message(subject, ember, worker):
    FakeEmber(ember, history=False)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING
    assert task.phase == "Original saved; history needs repair"
    assert task.error == "history write failed"


def test_it_fetches_the_image_once_across_two_finishes(subject, ember, worker):
    fake = FakeEmber(ember, history=False)
    [task] = plan(subject)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING

    fake.repair_history()
    engine.reconcile(task=task, client=worker.client)
    task.refresh_from_db()
    assert task.state == TaskState.COPYING
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert Asset.objects.get(task=task).ember_history_id == "hist_job_1"
    assert fake.file_route.call_count == 1
    assert len(fake.submits) == 1


@pytest.mark.parametrize("bad", ["not an image", "wrong sha256"])
def test_it_ends_copy_failed_on_bad_bytes_and_saves_and_releases_nothing(
    subject, ember, worker, bad
):
    fake = FakeEmber(ember)
    [broken, healthy] = plan(subject, candidates=2)
    before = originals_on_disk()

    def file(request, image_id):
        data = fake.images[image_id]
        if image_id == "img_1":
            data = b"<html>oops</html>" if bad == "not an image" else data + b"!"
            if bad == "not an image":
                # Ember's sha256 matches these bytes: only the image check can catch them.
                fake.jobs["job_1"]["result"]["image"]["sha256"] = hashlib.sha256(data).hexdigest()
        return httpx.Response(200, content=data, headers={"Content-Type": "image/png"})

    fake.file_route.mock(side_effect=file)
    # The first task's job must be job_1: plan order is ordinal order.
    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0))

    broken.refresh_from_db()
    healthy.refresh_from_db()
    assert broken.state == TaskState.COPY_FAILED
    assert broken.error
    assert broken.result is not None  # the saved answer stays for a later reconcile
    assert not Asset.objects.filter(task=broken).exists()
    released = [c.request.url.path for c in fake.release_route.calls]
    assert "/api/v1/explorations/img_1/protection" not in released
    assert healthy.state == TaskState.DONE  # the pump kept going
    assert len(originals_on_disk() - before) == 1


def test_it_copies_a_copy_failed_task_after_reconcile_without_generating_again(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    fake.file_route.mock(return_value=httpx.Response(503))
    [task] = plan(subject)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED

    fake.file_route.mock(side_effect=fake._file)
    engine.reconcile(task=task, client=worker.client)
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert len(fake.submits) == 1


def test_it_finishes_two_tasks_whose_results_have_the_same_bytes(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.placeholder = png_bytes(99)  # a provider's placeholder, sent for both candidates
    sha = hashlib.sha256(fake.placeholder).hexdigest()
    tasks = plan(subject, candidates=2)
    before = originals_on_disk()

    drain(worker)

    assert {Task.objects.get(pk=t.pk).state for t in tasks} == {TaskState.DONE}
    assets = Asset.objects.filter(task__in=tasks).order_by("ember_image_id")
    assert [(a.ember_image_id, a.ember_history_id, a.sha256) for a in assets] == [
        ("img_1", "hist_1", sha),
        ("img_2", "hist_2", sha),
    ]
    assert originals_on_disk() - before == {f"{sha}.png"}  # one file, two rows
    released = sorted(c.request.url.path for c in fake.release_route.calls)
    assert released == [f"/api/v1/explorations/img_{n}/protection" for n in (1, 2)]


def test_it_finishes_a_task_whose_result_equals_a_reference_photo(subject, ember, worker):
    fake = FakeEmber(ember)
    reference = subject.assets.get()
    fake.placeholder = originals.read(reference.sha256, reference.mime)
    [task] = plan(subject)
    before = originals_on_disk()

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    generated = Asset.objects.get(task=task)
    assert generated.pk != reference.pk
    assert (generated.origin, generated.ember_image_id) == ("generated", "img_1")
    assert generated.sha256 == reference.sha256
    assert list(subject.assets.filter(origin="uploaded")) == [reference]
    assert originals_on_disk() == before


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
    assert WorkerHeartbeat.status() == "worker running"
    WorkerHeartbeat.objects.update(seen_at=timezone.now() - timedelta(minutes=5))
    assert WorkerHeartbeat.status().startswith("no worker seen since ")


# --- ids Ember names that must not go into a URL path ---------------------------------

UNSAFE_JOB = "../x"  # GET /api/v1/api-generators/x: another route
UNSAFE_IMAGE = "img_1/../../history"  # GET /api/v1/history/file: another route


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_rests_uncertain_and_sends_nothing_more_when_a_202_names_an_unsafe_job_id(
    subject, ember, worker, frame
):
    fake = FakeEmber(ember)

    def accepted_under_an_unsafe_id(request: httpx.Request) -> httpx.Response:
        fake._submit(request)  # Ember took (and charged) the job ...
        return httpx.Response(202, json={"id": UNSAFE_JOB, "status": "queued"})  # ... oddly named

    fake.submit_route.mock(side_effect=accepted_under_an_unsafe_id)
    catch_strays(ember)
    [task] = plan(subject, frames=(frame,))

    drain(worker)
    drain(worker)  # and nothing sends it again on its own: a re-send gets the same id back

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.phase == RECONCILE_PHASE
    assert "'../x'" in task.error
    assert task.ember_job_id == ""
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]
    assert seen(ember) == [f"POST {JOBS}"]


def test_it_names_a_refused_job_id_on_the_task_escaped_and_cut_short(subject, ember, worker):
    fake = FakeEmber(ember)
    job_id = "../" * 300 + "\u202e<b>"
    fake.submit_route.mock(return_value=httpx.Response(202, json={"id": job_id}))
    catch_strays(ember)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert "'../../../" in task.error
    assert job_id not in task.error and "\u202e" not in task.error
    assert len(task.error) < len(MAY_HAVE_REACHED) + 200, "the id is cut to about 80 characters"
    assert seen(ember) == [f"POST {JOBS}"]


def test_it_rests_uncertain_and_fetches_nothing_when_a_result_names_an_unsafe_image_id(
    subject, ember, worker
):
    fake = FakeEmber(ember)

    def succeeded_naming_an_unsafe_image(request: httpx.Request, job_id: str) -> httpx.Response:
        fake.jobs[job_id]["result"]["image"]["id"] = UNSAFE_IMAGE
        return fake._poll(request, job_id)

    fake.poll_route.mock(side_effect=succeeded_naming_an_unsafe_image)
    catch_strays(ember)
    [task] = plan(subject)

    drain(worker)
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert ascii(UNSAFE_IMAGE) in task.error
    assert "protected" in task.error  # a paid original may be waiting in Ember
    assert not Asset.objects.filter(task=task).exists()
    assert seen(ember) == [f"POST {JOBS}", f"GET {JOBS}/job_1"]  # no fetch, no release


def test_it_polls_nothing_for_a_task_whose_recorded_job_id_is_unsafe(subject, ember, worker):
    FakeEmber(ember)
    catch_strays(ember)
    [task] = plan(subject)
    move(task, TaskState.RUNNING, ember_job_id=UNSAFE_JOB, submitted_at=timezone.now())

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert "'../x'" in task.error
    assert seen(ember) == []


def test_it_fetches_and_releases_nothing_for_a_saved_answer_naming_an_unsafe_image(
    subject, ember, worker
):
    FakeEmber(ember)
    catch_strays(ember)
    [task] = plan(subject)
    result = {
        "image": {"id": UNSAFE_IMAGE, "mime": "image/png", "sha256": "ab" * 32},
        "history": {"id": "hist_1"},
        "history_error": None,
    }
    move(task, TaskState.COPYING, ember_job_id="job_1", result=result)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert ascii(UNSAFE_IMAGE) in task.error
    assert not Asset.objects.filter(task=task).exists()
    assert seen(ember) == []


# --- an image too large to keep --------------------------------------------------------


def test_it_ends_copy_failed_at_once_when_ember_sends_an_image_over_the_cap(
    subject, ember, worker, settings
):
    settings.AVATARS_MAX_IMAGE_BYTES = cap = 256 * 1024
    chunk = 64 * 1024
    fake = FakeEmber(ember)
    taken = [0]
    fake.file_route.mock(
        side_effect=lambda request, image_id: httpx.Response(
            200, content=flood(100 * cap, taken, chunk=chunk), headers={"Content-Type": "image/png"}
        )
    )
    [task] = plan(subject)
    before = originals_on_disk()

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert task.error == originals.too_large()
    assert task.result is not None  # the saved answer stays for a later reconcile
    assert fake.file_route.call_count == 1  # Ember would send the same bytes again
    assert taken[0] <= cap + chunk, f"read {taken[0]} bytes; the cap is {cap} + {chunk}"
    assert not fake.release_route.called
    assert not Asset.objects.filter(task=task).exists()
    assert originals_on_disk() == before


def test_it_rests_a_clip_accepted_under_an_unsafe_id_uncertain_even_when_recording_fails(
    subject, ember, worker, monkeypatch
):
    fake = FakeEmber(ember)
    fake.submit_route.mock(return_value=httpx.Response(202, json={"id": UNSAFE_JOB}))
    catch_strays(ember)
    [task] = plan(subject, frames=("clip",))
    monkeypatch.setattr(steps, "_record_refusal", database_error)

    task = drive_once(worker, task)
    monkeypatch.undo()
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN  # not queued: a re-send gets the same id back
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.UNKNOWN]
    assert "'../x'" in task.attempts.get().error
    assert seen(ember) == [f"POST {JOBS}"]
