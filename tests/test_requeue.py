"""Queuing again a failed task nothing was paid for, once its reference photo is repaired."""

import httpx
import pytest
from django.utils import timezone

from studio import engine, originals
from studio.engine.requeue import REQUEUED_PHASE
from studio.models import Attempt, Task, TaskState
from studio.phrases import REFERENCE_CHANGED
from studio.store import move
from tests.admin_pages import change_page, one_message_about, row_of, run_action
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber
from tests.studio_pages import text

pytestmark = pytest.mark.django_db

REPAIRED_NEXT_STEP = (
    "Nothing was sent or paid for. Once an operator repairs the reference photo, they can "
    "queue it again."
)


# --- the cast -------------------------------------------------------------------------


def failed_on_its_reference(subject, worker) -> tuple[Task, bytes]:
    """A task the worker failed, sending nothing, because its reference photo changed.

    Returns the task and the photo's true bytes, for the repair.
    """
    [task] = plan(subject)
    ref = task.references[0]
    path = originals.path_for(ref["sha256"], ".png")
    good = path.read_bytes()
    path.write_bytes(b"someone edited this photo")
    drain(worker)
    task.refresh_from_db()
    assert (task.state, task.error) == (TaskState.FAILED, REFERENCE_CHANGED)
    return task, good


def repair(task: Task, good: bytes) -> None:
    """Put the photo's true bytes back, as `check_originals --repair` does."""
    ref = task.references[0]
    originals.path_for(ref["sha256"], ".png").write_bytes(good)


# --- the service ----------------------------------------------------------------------


def test_a_repaired_task_is_queued_again_and_paid_for_once(subject, ember, worker):
    fake = FakeEmber(ember)
    task, good = failed_on_its_reference(subject, worker)
    assert fake.submits == []
    repair(task, good)

    engine.requeue(task=task)
    assert row_of(task).state == TaskState.QUEUED
    assert row_of(task).error == ""
    drain(worker)

    assert row_of(task).state == TaskState.DONE
    assert fake.charges(str(task.pk)) == 1
    assert len(fake.submits) == 1


def test_it_refuses_while_the_reference_still_fails_its_checksum(subject, ember, worker):
    task, _ = failed_on_its_reference(subject, worker)
    version = row_of(task).version

    with pytest.raises(engine.RequeueRefused, match="still fails its checksum"):
        engine.requeue(task=task)

    assert (row_of(task).state, row_of(task).version) == (TaskState.FAILED, version)


def test_it_never_queues_again_a_task_ember_took_a_job_for(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.poll_route.mock(
        return_value=httpx.Response(
            200, json={"id": "job_1", "status": "failed", "error": {"message": "No."}}
        )
    )
    [task] = plan(subject)
    drain(worker)
    assert row_of(task).state == TaskState.FAILED

    with pytest.raises(engine.RequeueRefused) as refused:
        engine.requeue(task=task)

    assert str(refused.value) == engine.REQUEUE_WAS_SENT
    assert row_of(task).state == TaskState.FAILED
    assert len(fake.submits) == 1


def test_a_second_requeue_of_one_task_changes_nothing(subject, ember, worker):
    task, good = failed_on_its_reference(subject, worker)
    repair(task, good)
    stale = row_of(task)  # what a second tab or person saw: still failed
    seen = stale.version

    engine.requeue(task=task)
    with pytest.raises(engine.RequeueRefused) as refused:
        engine.requeue(task=stale)

    assert str(refused.value) == (  # what it is now: someone queued it already
        f'{engine.REQUEUE_NOT_FAILED} It is queued now: "{REQUEUED_PHASE}".'
    )
    assert row_of(task).state == TaskState.QUEUED
    assert row_of(task).version == seen + 1  # one move, not two


def test_a_failed_task_with_an_attempt_on_record_is_refused(subject):
    [task] = plan(subject)
    Attempt.objects.create(
        task=task, number=1, submitted_at=timezone.now(), outcome=Attempt.Outcome.UNKNOWN
    )
    move(task, TaskState.FAILED, phase="Failed", error=REFERENCE_CHANGED)

    with pytest.raises(engine.RequeueRefused, match="pay a second time"):
        engine.requeue(task=task)


# --- the admin and the studio ------------------------------------------------------------


def test_the_admin_queues_it_again_from_the_tasks_page(admin_client, subject, ember, worker):
    task, good = failed_on_its_reference(subject, worker)
    repair(task, good)
    page = admin_client.get(change_page(task))
    assert 'id="repair_requeue_tasks"' in page.text

    response = run_action(admin_client, Task, "requeue_tasks", [task])

    assert row_of(task).state == TaskState.QUEUED
    assert "failed → queued; nothing had been paid for it" in one_message_about(response, task)


def test_the_admin_says_why_it_did_not_queue_again(admin_client, subject, ember, worker):
    task, _ = failed_on_its_reference(subject, worker)

    response = run_action(admin_client, Task, "requeue_tasks", [task])

    assert row_of(task).state == TaskState.FAILED
    assert one_message_about(response, task).endswith(engine.REQUEUE_REFERENCE_BAD)


def test_the_batch_page_says_nothing_was_paid_and_what_an_operator_can_do(
    signed_in, subject, ember, worker
):
    task, _ = failed_on_its_reference(subject, worker)

    page = text(signed_in.get(f"/batches/{task.batch_id}/"))

    assert REPAIRED_NEXT_STEP in page
