"""The worker following a running job, and a changed reference (docs/design.md §6.6)."""

from datetime import timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import engine, originals
from studio.models import TaskState
from studio.store import move
from studio.worker import (
    REFERENCE_CHANGED,
    steps,
)
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber
from tests.worker_drive import fake_submit

pytestmark = pytest.mark.django_db


def polls_answered(fake: FakeEmber, answers: list) -> None:
    """Have Ember's poll route give `answers` in turn (an exception is raised), then the
    fake's own."""
    left = iter(answers)

    def poll(request, job_id):
        answer = next(left, None)
        if answer is None:
            return fake._poll(request, job_id)
        if isinstance(answer, Exception):
            raise answer
        return answer

    fake.poll_route.mock(side_effect=poll)


def updates_written(monkeypatch) -> list[dict]:
    """Record the fields of every update the worker's steps write, in order."""
    written: list[dict] = []
    real_update = steps.update

    def update(obj, **fields):
        written.append(fields)
        return real_update(obj, **fields)

    monkeypatch.setattr(steps, "update", update)
    return written


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
    running = httpx.Response(200, json={"id": "job_1", "status": "running"})
    polls_answered(fake, [httpx.Response(502), httpx.ConnectError("down"), running])
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.poll_route.call_count == 4


def test_a_resubmit_whose_reference_changed_rests_uncertain_not_failed(subject, ember, worker):
    """The first send may be a paid original: a failed task would never collect it."""
    fake = FakeEmber(ember)
    fake.lose_answers = 1
    [task] = plan(subject)
    drain(worker)
    task.refresh_from_db()
    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)
    ref = task.references[0]
    originals.path_for(ref["sha256"], ".png").write_bytes(b"someone edited this photo")

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.error.startswith(REFERENCE_CHANGED + " The previous submit may have reached")
    assert len(fake.submits) == 1


@pytest.mark.parametrize(
    ("trouble", "phase"),
    [
        (httpx.ConnectError("down"), "Ember could not be reached; still polling"),
        (httpx.ReadError("dropped"), "Ember's answer did not arrive; still polling"),
        (httpx.Response(200, text="{oops"), "Ember's answer was unusable; still polling"),
    ],
    ids=["unreachable", "dropped", "unusable"],
)
def test_it_says_why_a_poll_taught_nothing(subject, ember, worker, monkeypatch, trouble, phase):
    """Found by a review: an unreachable Ember was called an unusable answer."""
    fake = FakeEmber(ember)
    written = updates_written(monkeypatch)
    polls_answered(fake, [trouble])
    [task] = plan(subject)

    drain(worker)

    assert [fields.get("phase", "") for fields in written] == [phase]
    task.refresh_from_db()
    assert task.state == TaskState.DONE


def test_a_poll_answered_again_takes_the_trouble_off_the_row(subject, ember, worker, monkeypatch):
    """Found by a re-review: Ember back, its polls answered "running" every 3 s, and the
    batch page still said "Ember cannot be reached just now" until the long job ended."""
    fake = FakeEmber(ember)
    written = updates_written(monkeypatch)
    running = httpx.Response(200, json={"id": "job_1", "status": "running"})
    polls_answered(fake, [httpx.ConnectError("down"), running])
    plan(subject)

    drain(worker)

    trouble = {
        "phase": "Ember could not be reached; still polling",
        "error": "Ember could not be reached (ConnectError).",
    }
    assert written[:2] == [trouble, {"phase": "Ember is generating", "error": ""}], written


def test_it_marks_a_job_ember_does_not_know_as_uncertain(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.poll_route.mock(
        return_value=httpx.Response(404, json={"error": {"code": "not_found", "message": "?"}})
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN
    assert task.phase == "Reconcile before retry"
    assert task.error == f"Ember does not know job {task.ember_job_id}. Nothing was resubmitted."
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
