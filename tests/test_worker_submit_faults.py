"""Whatever goes wrong on the submit path, the task does not stay `submitting`."""

import asyncio
import logging
import time
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from studio.models import Attempt, Task, TaskState
from studio.store import move
from studio.worker import (
    MAY_HAVE_REACHED,
    RECONCILE_PHASE,
    Worker,
    steps,
    transitions,
)
from tests.factories import drain, plan
from tests.fake_ember import JOBS, FakeEmber
from tests.worker_drive import (
    assert_sent_once_under_its_key,
    database_error,
    drive_once,
    submit_once,
)

pytestmark = pytest.mark.django_db


# --- whatever goes wrong on the submit path, the task does not stay `submitting` ------


def gzip_that_is_not(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        202, stream=httpx.ByteStream(b"not gzip at all"), headers={"Content-Encoding": "gzip"}
    )


UNDECODABLE_202S = {
    "a body that fails its content encoding": gzip_that_is_not,
    "JSON nested too deep to decode": lambda request: httpx.Response(202, text="[" * 100_000),
}
# What the task says beyond MAY_HAVE_REACHED: the client names JSON it cannot parse.
SAYS = {
    "a body that fails its content encoding": "",
    "JSON nested too deep to decode": " (Ember answered 202 with a body that is not JSON.)",
}


@pytest.mark.parametrize("case", UNDECODABLE_202S.keys())
def test_it_marks_an_image_uncertain_at_once_when_a_202_cannot_be_decoded(
    subject, ember, worker, case
):
    fake = FakeEmber(ember)
    fake.submit_route.mock(side_effect=UNDECODABLE_202S[case])
    [task] = plan(subject)

    task = drive_once(worker, task)

    assert task.state == TaskState.UNCERTAIN
    assert task.phase == RECONCILE_PHASE
    assert task.error == MAY_HAVE_REACHED + SAYS[case]
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


@pytest.mark.parametrize("frame", ["image", "clip"])
def test_it_logs_the_job_id_when_recording_an_accepted_submit_fails(
    subject, ember, worker, frame, monkeypatch, caplog
):
    """The first recording fails (a full disk), the next one takes: the task is `running`
    with its job, not "may have reached Ember" with the job id in the log alone (a review's
    16 tasks waited 300 s for the history search to find the jobs they had been told)."""
    fake = FakeEmber(ember)
    [task] = plan(subject, frames=(frame,))
    monkeypatch.setattr(steps, "_record_accepted", database_error)

    task = drive_once(worker, task)

    assert fake.submit_route.call_count == 1
    assert (task.state, task.ember_job_id) == (TaskState.RUNNING, "job_1")
    assert [(a.ember_job_id, a.outcome) for a in task.attempts.all()] == [
        ("job_1", Attempt.Outcome.ACCEPTED)
    ]
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
    assert (task.state, task.ember_job_id) == (TaskState.RUNNING, "job_1")  # the job it was told
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.ACCEPTED]
    assert fake.submit_route.call_count == 1


def test_it_keeps_embers_answer_until_a_sweep_has_settled_its_task(
    subject, ember, worker, monkeypatch
):
    """Found by a full-disk review: the sweep's own write failed too, yet Ember's answer was
    dropped, and the next sweep woke the task as "may have reached Ember", its paid job
    known to the log alone (and a resubmit offered) until the history search found it."""
    fake = FakeEmber(ember)
    [task] = plan(subject)
    monkeypatch.setattr(steps, "_record_accepted", database_error)
    monkeypatch.setattr(steps, "_settle_unrecorded", database_error, raising=False)
    monkeypatch.setattr(transitions, "_record_accepted", database_error)

    async def three_passes() -> None:
        await worker.pump()
        await asyncio.gather(*worker.in_hand.values(), return_exceptions=True)
        worker.request_stop()  # start nothing new: these passes only sweep
        await worker.pump()  # its write fails again: the disk is still full
        monkeypatch.undo()  # the database is back
        await worker.pump()

    async_to_sync(three_passes)()

    task.refresh_from_db()
    assert (task.state, task.ember_job_id) == (TaskState.RUNNING, "job_1"), task.phase
    assert [a.outcome for a in task.attempts.all()] == [Attempt.Outcome.ACCEPTED]
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
