"""Cancelling a task or a batch (docs/design.md §8): only what Ember does not have yet."""

import pytest
from django.utils import timezone

from studio import engine
from studio.engine import TooLate
from studio.models import TaskState
from studio.store import Conflict, move, update
from tests.factories import a_batch, a_clip_sent_once, a_task, drain, ember_result
from tests.fake_ember import FakeEmber
from tests.task_rows import row_of, second_writer_moves

pytestmark = pytest.mark.django_db

TOO_LATE = "This task has already been sent to Ember; the work is kept."


# --- cancel -------------------------------------------------------------------


def test_it_cancels_a_queued_task(subject):
    task = a_task(subject)
    version = task.version

    cancelled = engine.cancel_task(task=task)

    row = row_of(task)
    assert cancelled.state == row.state == TaskState.CANCELLED
    assert row.version == version + 1
    assert row.phase == "Cancelled"
    assert row.error == "Cancelled before anything was sent to Ember."
    assert row.next_attempt_at is None  # the worker will not pick it up


def test_it_cancels_a_task_whose_references_are_being_checked(subject):
    task = move(a_task(subject), TaskState.PREPARING, phase="Checking reference photos")
    version = task.version

    engine.cancel_task(task=task)

    row = row_of(task)
    assert row.state == TaskState.CANCELLED
    assert row.version == version + 1


@pytest.mark.parametrize(
    ("state", "fields"),
    [
        (TaskState.SUBMITTING, {"submitted_at": timezone.now()}),
        (TaskState.RUNNING, {"ember_job_id": "job_1"}),
        (TaskState.COPYING, {"ember_job_id": "job_1", "result": ember_result()}),
        (TaskState.DONE, {"ember_job_id": "job_1", "result": ember_result(), "phase": "Complete"}),
    ],
)
def test_it_refuses_to_cancel_work_already_with_ember(subject, state, fields):
    task = move(a_task(subject), state, **fields)
    before = row_of(task)

    with pytest.raises(TooLate) as refused:
        engine.cancel_task(task=task)

    after = row_of(task)
    assert str(refused.value) == TOO_LATE
    assert (after.state, after.version, after.phase) == (before.state, before.version, before.phase)


def test_it_refuses_to_cancel_a_stale_copy_whose_task_was_sent_meanwhile(subject):
    stale = a_task(subject)  # read while queued
    second_writer_moves(stale, TaskState.SUBMITTING)
    moved = row_of(stale)

    with pytest.raises(TooLate) as refused:
        engine.cancel_task(task=stale)

    row = row_of(stale)
    assert str(refused.value) == TOO_LATE
    assert row.state == TaskState.SUBMITTING  # not overwritten with `cancelled`
    assert row.version == moved.version


def test_it_still_cancels_a_stale_copy_when_the_task_has_only_moved_to_preparing(subject):
    stale = a_task(subject)
    second_writer_moves(stale, TaskState.PREPARING)
    moved = row_of(stale)

    engine.cancel_task(task=stale)

    row = row_of(stale)
    assert row.state == TaskState.CANCELLED
    assert row.version == moved.version + 1


def test_it_answers_a_second_cancel_without_claiming_the_task_reached_ember(subject):
    task = a_task(subject)
    engine.cancel_task(task=task)

    # Cancelled before anything was sent: the work is not "with Ember".
    again = engine.cancel_task(task=row_of(task))

    assert again.state == TaskState.CANCELLED
    assert row_of(task).state == TaskState.CANCELLED


def test_it_refuses_to_cancel_a_clip_already_sent_under_its_key(subject):
    task = a_clip_sent_once(subject)
    before = row_of(task)

    with pytest.raises(TooLate) as refused:
        engine.cancel_task(task=task)

    after = row_of(task)
    assert str(refused.value) == TOO_LATE
    assert (after.state, after.version) == (TaskState.QUEUED, before.version)


def test_cancelling_a_resubmitted_clip_withdraws_the_resubmit_and_keeps_it_reconcilable(subject):
    task = a_clip_sent_once(subject)
    move(task, TaskState.UNCERTAIN, submitted_at=timezone.now())
    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)

    withdrawn = engine.cancel_task(task=row_of(task))

    # The first key's clip may be a paid original in Ember: cancelled, nothing would
    # ever collect it. Only the resubmit is withdrawn.
    assert withdrawn.state == row_of(task).state == TaskState.UNCERTAIN
    assert withdrawn.error == engine.RESUBMIT_WITHDRAWN
    assert row_of(task).attempts.count() == 1


def test_cancelling_a_resubmitted_image_withdraws_it_and_reconcile_still_collects_the_first(
    subject, ember, worker
):
    """Found by the property test: the cancel orphaned a paid original in Ember."""
    fake = FakeEmber(ember)
    fake.lose_answers = 1
    task = a_task(subject)
    drain(worker)  # job_1 is created and paid for; its answer is lost
    assert row_of(task).state == TaskState.UNCERTAIN
    seen = row_of(task)  # the task as the person saw it
    engine.resubmit(task=seen, seen_version=seen.version, confirmed_not_received=True)

    withdrawn = engine.cancel_task(task=row_of(task))
    drain(worker)

    assert withdrawn.state == row_of(task).state == TaskState.UNCERTAIN
    assert len(fake.submits) == 1, "the withdrawn resubmit was sent anyway"
    engine.reconcile(task=row_of(task))
    drain(worker)
    done = row_of(task)
    assert done.state == TaskState.DONE and done.asset.ember_image_id == "img_1"
    assert fake.charges(str(task.pk)) == 1


def test_a_batch_cancel_reports_a_withdrawn_resubmit_as_kept(subject):
    task = a_clip_sent_once(subject)
    move(task, TaskState.UNCERTAIN, submitted_at=timezone.now())
    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)

    report = engine.cancel_batch(batch=task.batch)

    assert [t.pk for t in report.kept] == [task.pk] and report.cancelled == []
    assert row_of(task).state == TaskState.UNCERTAIN


def test_it_keeps_the_clips_of_a_batch_already_sent_under_their_key(subject):
    sent = a_clip_sent_once(subject)

    report = engine.cancel_batch(batch=sent.batch)

    assert [t.pk for t in report.kept] == [sent.pk]
    assert row_of(sent).state == TaskState.QUEUED


def test_it_refuses_a_versioned_write_when_the_row_moved_and_writes_nothing(subject):
    task = a_task(subject)
    old_version = task.version
    second_writer_moves(task, TaskState.SUBMITTING)
    moved = row_of(task)

    with pytest.raises(Conflict):
        update(task, expected=old_version, phase="Overwritten by a stale writer")

    row = row_of(task)
    assert (row.state, row.phase, row.version) == (
        TaskState.SUBMITTING,
        moved.phase,
        moved.version,
    )


def test_it_writes_and_bumps_the_version_when_the_expected_version_holds(subject):
    task = a_task(subject)

    update(task, expected=task.version, phase="Checked")

    row = row_of(task)
    assert (row.phase, row.version) == ("Checked", 2)
    assert task.version == 2


def test_it_cancels_what_it_can_in_a_batch_and_reports_what_it_kept(subject):
    batch = a_batch(subject, candidates=4)
    queued, preparing, running, already = batch.tasks.order_by("ordinal")
    move(preparing, TaskState.PREPARING)
    move(running, TaskState.RUNNING, ember_job_id="job_3")
    move(already, TaskState.CANCELLED)
    failed = a_task(subject)
    move(failed, TaskState.FAILED, batch=batch)  # failed before anything reached Ember

    report = engine.cancel_batch(batch=batch)

    assert sorted(t.pk for t in report.cancelled) == sorted([queued.pk, preparing.pk])
    assert [t.pk for t in report.kept] == [running.pk]
    states = dict(batch.tasks.values_list("pk", "state"))
    assert states == {
        queued.pk: TaskState.CANCELLED,
        preparing.pk: TaskState.CANCELLED,
        running.pk: TaskState.RUNNING,
        already.pk: TaskState.CANCELLED,
        failed.pk: TaskState.FAILED,
    }
