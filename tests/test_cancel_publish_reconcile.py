"""Cancel, publish and reconcile (docs/design.md §8-§10): the services a person drives."""

import contextlib
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db.models import F
from django.utils import timezone

from studio import engine
from studio.ember.client import EmberClient
from studio.engine import PublishRefused, TooLate
from studio.engine import sets as set_services
from studio.models import Asset, Attempt, AvatarSet, Origin, Task, TaskState
from studio.store import Conflict, move, update
from tests.factories import (
    a_batch,
    a_clip_sent_once,
    a_set,
    a_task,
    drain,
    ember_result,
    generated_asset,
    history_route,
    history_row,
    uncertain,
)
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

HISTORY = "/api/v1/history"
RELEASE = "/api/v1/explorations/{}/protection"
TOO_LATE = "This task has already been sent to Ember; the work is kept."
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


def row_of(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def second_writer_moves(task: Task, state: TaskState) -> None:
    """Another process (the worker) writes the row behind this copy's back."""
    Task.objects.filter(pk=task.pk).update(
        state=state,
        next_attempt_at=timezone.now() if state in (TaskState.QUEUED,) else None,
        version=F("version") + 1,
    )


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
    engine.resubmit(task=task, confirmed_not_received=True)

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
    engine.resubmit(task=row_of(task), confirmed_not_received=True)

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
    engine.resubmit(task=task, confirmed_not_received=True)

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


# --- publish ------------------------------------------------------------------


def test_it_refuses_to_publish_a_generated_image_without_its_ember_history(subject):
    chosen = a_set(
        generated_asset(history_id="hist_1"),
        generated_asset(history_id=""),
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=chosen)

    assert str(refused.value) == PUBLISH_REFUSED
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


def test_it_publishes_a_set_whose_generated_images_all_have_history(subject):
    chosen = a_set(generated_asset(history_id="hist_1"), generated_asset(history_id="hist_2"))

    published = engine.publish(avatar_set=chosen)

    assert published.published_at is not None
    assert AvatarSet.objects.get(pk=chosen.pk).published_at == published.published_at


def test_it_keeps_the_first_publication_time_when_published_again(subject):
    chosen = engine.publish(avatar_set=a_set(generated_asset(history_id="hist_1")))
    first = chosen.published_at

    again = engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    assert again.published_at == first


def test_it_refuses_to_change_a_published_sets_choice(subject):
    chosen = engine.publish(avatar_set=a_set(generated_asset(history_id="hist_1")))
    sneaky = generated_asset(history_id="")  # would have been refused by the guard

    with pytest.raises(engine.InvalidRequest, match="This set is published"):
        engine.choose_assets(avatar_set=chosen, asset_ids=[sneaky.pk])

    assert list(chosen.items.values_list("asset__ember_history_id", flat=True)) == ["hist_1"]


def test_it_never_lets_uploaded_photos_block_publishing(subject):
    uploaded = subject.assets.get(origin=Origin.UPLOADED)
    assert uploaded.ember_history_id == ""
    chosen = a_set(uploaded, generated_asset(history_id="hist_1"))

    engine.publish(avatar_set=chosen)

    assert AvatarSet.objects.get(pk=chosen.pk).published_at is not None


def test_it_publishes_once_the_missing_history_is_recovered(subject):
    missing = generated_asset(history_id="")
    chosen = a_set(missing)
    with pytest.raises(PublishRefused):
        engine.publish(avatar_set=chosen)

    update(missing, ember_history_id="hist_9")
    engine.publish(avatar_set=chosen)

    assert AvatarSet.objects.get(pk=chosen.pk).published_at is not None


def interleave(monkeypatch, name: str, other_writer, *, times: int = 1) -> None:
    """Run `other_writer`, committed, just before the set service's next `times` calls of `name`."""
    real = getattr(set_services, name)
    left = [times]

    def first_the_other_writer(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            still, left[0] = left[0] - 1, 0  # the other writer's own calls go straight through
            other_writer()
            left[0] = still
        return real(*args, **kwargs)

    monkeypatch.setattr(set_services, name, first_the_other_writer)


def test_it_refuses_to_publish_an_unrecovered_image_chosen_after_its_check(subject, monkeypatch):
    kept = generated_asset(history_id="hist_1")
    unrecovered = generated_asset(history_id="")
    chosen = a_set(kept)
    # Another request changes the choice between publish's check and its write.
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=[kept.pk, unrecovered.pk]
        ),
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert str(refused.value) == PUBLISH_REFUSED
    assert row.published_at is None
    assert list(row.items.values_list("asset", flat=True)) == [kept.pk, unrecovered.pk]


def test_it_publishes_the_newer_choice_only_after_checking_it(subject, monkeypatch):
    first, second = generated_asset(history_id="hist_1"), generated_asset(history_id="hist_2")
    chosen = a_set(first)
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=[second.pk]
        ),
    )

    published = engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert row.published_at is not None
    assert (published.version, published.published_at) == (row.version, row.published_at)
    assert list(row.items.values_list("asset", flat=True)) == [second.pk]


def test_it_gives_up_publishing_a_set_whose_choice_keeps_changing(subject, monkeypatch):
    first, second = generated_asset(history_id="hist_1"), generated_asset(history_id="hist_2")
    chosen = a_set(first)
    orders = iter([[second.pk, first.pk], [first.pk, second.pk]] * 2)
    interleave(
        monkeypatch,
        "update",
        lambda: engine.choose_assets(
            avatar_set=AvatarSet.objects.get(pk=chosen.pk), asset_ids=next(orders)
        ),
        times=engine.PUBLISH_TRIES,
    )

    with pytest.raises(PublishRefused) as refused:
        engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk))

    assert str(refused.value) == (
        "This set kept changing while it was being published; publish it again."
    )
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


def test_it_refuses_to_change_a_set_published_while_the_choice_was_checked(subject, monkeypatch):
    kept = generated_asset(history_id="hist_1")
    sneaky = generated_asset(history_id="")
    chosen = a_set(kept)
    draft = AvatarSet.objects.get(pk=chosen.pk)  # read while still a draft
    # Another request publishes the set while this choice is being checked.
    interleave(
        monkeypatch,
        "existing_ids",
        lambda: engine.publish(avatar_set=AvatarSet.objects.get(pk=chosen.pk)),
    )

    with pytest.raises(engine.InvalidRequest) as refused:
        engine.choose_assets(avatar_set=draft, asset_ids=[sneaky.pk])

    row = AvatarSet.objects.get(pk=chosen.pk)
    assert str(refused.value) == "This set is published; its choice can no longer change."
    assert row.published_at is not None
    assert list(row.items.values_list("asset", flat=True)) == [kept.pk]


# --- reconcile ----------------------------------------------------------------


def test_it_hands_an_uncertain_task_with_a_history_row_back_to_copying(subject, ember):
    task = uncertain(a_task(subject))
    row = history_row(task, job_id="job_7")
    route = history_route(ember, task, [row])

    reconciled = engine.reconcile(task=task)

    saved = row_of(task)
    assert route.call_count == 1
    assert reconciled.state == saved.state == TaskState.COPYING
    assert saved.result == row["result"]
    assert saved.ember_job_id == "job_7"
    assert saved.next_attempt_at is not None  # due for the worker's copy
    assert saved.error == ""
    assert list(saved.attempts.values_list("number", "ember_job_id")) == [(1, "job_7")]
    assert saved.attempts.count() == 1  # recorded, not resubmitted


def test_it_leaves_an_uncertain_task_uncertain_when_history_has_no_row(subject, ember):
    task = uncertain(a_task(subject))
    route = history_route(ember, task, [])

    reconciled = engine.reconcile(task=task)

    saved = row_of(task)
    assert route.call_count == 1
    assert reconciled.state == saved.state == TaskState.UNCERTAIN
    assert "has no row" in saved.phase
    assert saved.result is None
    assert saved.next_attempt_at is None  # the worker will not resubmit it
    assert saved.attempts.count() == 1


def test_it_ignores_history_rows_without_a_usable_result(subject, ember):
    task = uncertain(a_task(subject))
    broken = {**history_row(task), "result": {"image": {}}}
    history_route(ember, task, [broken])

    engine.reconcile(task=task)

    assert row_of(task).state == TaskState.UNCERTAIN


def test_it_says_so_when_embers_history_cannot_be_read(subject, ember):
    task = uncertain(a_task(subject))
    ember.get(HISTORY).respond(500)

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.UNCERTAIN
    assert saved.phase == "Ember's history could not be read: Ember answered HTTP 500."


def test_it_hands_a_history_missing_task_with_a_row_back_to_copying(subject, ember):
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_1")
    task = move(task, TaskState.COPYING, result=ember_result(image_id="img_1", history_id=None))
    task = move(
        task,
        TaskState.HISTORY_MISSING,
        phase="Original saved; history needs repair",
        error="history write failed",
    )
    row = history_row(task, job_id="job_1", image_id="img_1")
    history_route(ember, task, [row])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING
    assert saved.result == row["result"]
    assert saved.result["history"] == {"id": "hist_7"}
    assert saved.ember_job_id == "job_1"


def test_it_hands_a_copy_failed_task_back_to_copying_without_asking_ember(subject, ember):
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_1")
    answer = ember_result(image_id="img_1")
    task = move(task, TaskState.COPYING, result=answer)
    task = move(task, TaskState.COPY_FAILED, phase="Copy failed", error="disk full")
    route = ember.get(HISTORY).respond(200, json={"items": []})

    engine.reconcile(task=task)

    saved = row_of(task)
    assert not route.called
    assert len(ember.calls) == 0
    assert saved.state == TaskState.COPYING
    assert saved.result == answer
    assert saved.ember_job_id == "job_1"
    assert saved.next_attempt_at is not None


@pytest.mark.parametrize(
    ("state", "fields"),
    [
        (TaskState.QUEUED, {}),
        (TaskState.RUNNING, {"ember_job_id": "job_1"}),
        (TaskState.DONE, {"ember_job_id": "job_1", "result": ember_result(), "phase": "Complete"}),
        (TaskState.CANCELLED, {}),
    ],
)
def test_it_returns_a_task_that_is_not_reconcilable_unchanged(subject, ember, state, fields):
    task = move(a_task(subject), state, **fields)
    before = row_of(task)
    route = ember.get(HISTORY).respond(200, json={"items": []})

    returned = engine.reconcile(task=task)

    after = row_of(task)
    assert not route.called
    assert returned.state == state
    assert (after.state, after.version, after.phase, after.result) == (
        before.state,
        before.version,
        before.phase,
        before.result,
    )


def test_it_does_not_overwrite_a_task_that_moved_while_history_was_read(subject, ember):
    task = uncertain(a_task(subject))
    history_route(ember, task, [history_row(task)])

    class PersonResubmitsMeanwhile(EmberClient):
        """Ember answers (through respx) while a person moves the task back to queued."""

        async def history(self, task_id: str) -> list[dict[str, Any]]:
            rows = await super().history(task_id)
            await sync_to_async(second_writer_moves)(task, TaskState.QUEUED)
            return rows

    moved_version = task.version + 1
    # Exactly one side wins; reconcile may report the lost race, but never overwrites.
    client = PersonResubmitsMeanwhile()
    with contextlib.suppress(Conflict):
        engine.reconcile(task=task, client=client)
    async_to_sync(client.aclose)()

    saved = row_of(task)
    assert (saved.state, saved.version) == (TaskState.QUEUED, moved_version)
    assert saved.result is None


def test_an_unversioned_write_lands_even_after_a_second_writer_and_learns_the_version(subject):
    task = a_task(subject)
    second_writer_moves(task, TaskState.PREPARING)  # our copy is now one version behind

    update(task, phase="Recorded anyway")

    row = row_of(task)
    assert row.phase == "Recorded anyway"
    assert task.version == row.version  # the in-memory copy knows the real version
    update(task, expected=task.version, error="and a versioned write still works")
    assert row_of(task).error == "and a versioned write still works"


# --- reconcile: only this task's own original -------------------------------------


def released_images(fake: FakeEmber) -> list[str]:
    """The image ids Ember was asked to release, in order."""
    return [c.request.url.path.split("/")[-2] for c in fake.release_route.calls]


def test_it_never_adopts_nor_releases_the_original_of_a_lost_submit(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.lose_answers = 1  # job_1 reaches Ember (and is paid for); its answer is lost
    task = a_task(subject)
    drain(worker)
    assert row_of(task).state == TaskState.UNCERTAIN
    engine.resubmit(task=row_of(task), confirmed_not_received=True)
    fake.history = False  # job_2's history write fails ...
    fake.release_route.mock(return_value=httpx.Response(503))  # ... and its release is unsure
    drain(worker)
    task = row_of(task)
    asset = Asset.objects.get(task=task)
    assert (task.state, task.ember_job_id, asset.ember_image_id) == (
        TaskState.HISTORY_MISSING,
        "job_2",
        "img_2",
    )

    engine.reconcile(task=task, client=worker.client)  # Ember's history: only job_1's row
    drain(worker)

    task, asset = row_of(task), Asset.objects.get(pk=asset.pk)
    assert "img_1" not in released_images(fake)
    assert asset.ember_history_id == ""  # not hist_1, job_1's row
    assert task.state == TaskState.HISTORY_MISSING
    assert task.ember_job_id == "job_2"
    assert "job_1" in task.error and "img_1" in task.error
    assert "still protected in Ember" in task.error
    assert fake.file_route.call_count == 1  # img_2 only: img_1 was never fetched

    fake.repair_history()  # Ember writes job_2's row; it releases again
    fake.release_route.mock(return_value=httpx.Response(200, json={"protected": False}))
    engine.reconcile(task=task, client=worker.client)
    drain(worker)

    task, asset = row_of(task), Asset.objects.get(pk=asset.pk)
    assert task.state == TaskState.DONE
    assert asset.ember_history_id == "hist_job_2"
    assert task.protection_released is True
    assert released_images(fake) == ["img_2", "img_2"]
    assert list(task.attempts.values_list("number", "ember_job_id")) == [(1, "job_1"), (2, "job_2")]
    assert fake.charges(str(task.pk)) == 2


def test_it_adopts_no_row_when_two_could_be_the_lost_submit(subject, ember):
    task = uncertain(a_task(subject))
    rows = [
        history_row(task, job_id="job_7", image_id="img_7"),
        history_row(task, job_id="job_8", image_id="img_8"),
    ]
    history_route(ember, task, rows)

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.UNCERTAIN
    assert (saved.ember_job_id, saved.result) == ("", None)
    assert "img_7" in saved.error and "img_8" in saved.error
    assert list(saved.attempts.values_list("ember_job_id", flat=True)) == [""]


def test_it_adopts_the_one_row_no_other_attempt_of_the_task_has_recorded(subject, ember):
    task = uncertain(a_task(subject))  # attempt 1's answer was lost
    Attempt.objects.filter(task=task).update(ember_job_id="job_7", outcome=Attempt.Outcome.ACCEPTED)
    Attempt.objects.create(
        task=task, number=2, submitted_at=timezone.now(), outcome=Attempt.Outcome.UNKNOWN
    )
    mine = history_row(task, job_id="job_8", image_id="img_8")
    history_route(ember, task, [history_row(task, job_id="job_7", image_id="img_7"), mine])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING
    assert saved.ember_job_id == "job_8"
    assert saved.result["image"]["id"] == "img_8"
    assert list(saved.attempts.values_list("number", "ember_job_id")) == [
        (1, "job_7"),
        (2, "job_8"),
    ]


def test_it_never_takes_the_row_of_an_earlier_lost_submit_for_the_latest(subject, ember):
    task = uncertain(a_task(subject))  # attempt 1's answer was lost ...
    Attempt.objects.create(  # ... and so was the resubmit's
        task=task, number=2, submitted_at=timezone.now(), outcome=Attempt.Outcome.UNKNOWN
    )
    earlier = history_row(task, job_id="job_1", image_id="img_1")
    earlier["source_metadata"]["attempt"] = 1  # what attempt 1 sent
    history_route(ember, task, [earlier])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.UNCERTAIN
    assert (saved.ember_job_id, saved.result) == ("", None)
    assert list(saved.attempts.values_list("number", "ember_job_id")) == [(1, "job_1"), (2, "")]
    assert "img_1" in saved.error and "still protected in Ember" in saved.error


def test_it_never_takes_another_jobs_row_for_a_task_that_knows_its_job(subject, ember):
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_2")
    task = move(task, TaskState.UNCERTAIN, phase="Ember did not finish in time")
    history_route(ember, task, [history_row(task, job_id="job_1", image_id="img_1")])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.UNCERTAIN
    assert (saved.ember_job_id, saved.result) == ("job_2", None)
    assert "job_1" in saved.error and "img_1" in saved.error


def test_it_finishes_without_borrowing_the_history_or_release_of_another_image(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_2")
    asset = generated_asset(task=task, ember_image_id="img_2")
    # A saved answer that names another image than the one whose bytes are safe.
    task = move(task, TaskState.COPYING, asset=asset, result=ember_result("img_1", "hist_1"))

    drain(worker)

    task, asset = row_of(task), Asset.objects.get(pk=asset.pk)
    assert task.state == TaskState.HISTORY_MISSING
    assert asset.ember_history_id == ""
    assert released_images(fake) == ["img_2"]
    assert fake.file_route.call_count == 0


def test_it_takes_the_history_id_from_the_repaired_rows_own_id(subject, ember, worker):
    fake = FakeEmber(ember, history=False)
    task = a_task(subject)
    drain(worker)
    assert row_of(task).state == TaskState.HISTORY_MISSING
    # Ember repairs the row; the answer nested in it still says `history: null`.
    fake.repair_history(result_too=False)

    engine.reconcile(task=row_of(task), client=worker.client)
    drain(worker)

    task = row_of(task)
    assert task.state == TaskState.DONE
    assert Asset.objects.get(task=task).ember_history_id == "hist_job_1"
    assert fake.file_route.call_count == 1  # the image file was not fetched again
