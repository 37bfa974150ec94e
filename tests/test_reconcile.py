"""Reconcile (docs/design.md §10): an uncertain task learns from Ember's history what it is."""

import contextlib
import io
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from studio import engine
from studio.ember.client import EmberClient
from studio.ember.errors import EmberError
from studio.models import Asset, Attempt, TaskState
from studio.store import Conflict, move, update
from tests.factories import (
    a_task,
    drain,
    ember_result,
    generated_asset,
    history_route,
    history_row,
    stored_asset,
    uncertain,
)
from tests.fake_ember import FakeEmber
from tests.task_rows import row_of, second_writer_moves

pytestmark = pytest.mark.django_db

HISTORY = "/api/v1/history"


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


def test_it_leaves_the_task_as_it_was_when_ember_cannot_be_asked(subject, ember):
    """Found by the operators' review: the look-up's failure was written over the phase."""
    task = uncertain(a_task(subject))
    ember.get(HISTORY).respond(500)
    with pytest.raises(EmberError, match=r"^Ember answered HTTP 500\.$"):
        engine.reconcile(task=task)
    saved = row_of(task)
    assert (saved.state, saved.phase, saved.version) == (task.state, task.phase, task.version)


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


def test_the_command_says_a_task_is_not_reconcilable_and_exits_non_zero(subject, ember):
    """Found by a review: it printed "done -> done: Complete" and exited 0."""
    done = move(a_task(subject), TaskState.DONE, ember_job_id="job_1", phase="Complete")
    route = ember.get(HISTORY).respond(200, json={"items": []})
    out = io.StringIO()

    with pytest.raises(CommandError) as failed:
        call_command("reconcile", str(done.pk), stdout=out)

    assert failed.value.returncode == 1
    assert out.getvalue() == (
        f"{done.pk} done: not reconcilable (only uncertain, history_missing and copy_failed "
        "are, and done with an earlier send not looked for); left as it is\n"
    )
    assert not route.called


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
    seen = row_of(task)  # the task as the person saw it
    engine.resubmit(task=seen, seen_version=seen.version, confirmed_not_received=True)
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


@pytest.mark.parametrize("learned", ["now", "by an earlier reconcile"])
def test_it_takes_the_row_naming_its_lost_send_beside_a_send_it_never_made(subject, ember, learned):
    """Found by a review: restored from a backup taken before a person's resubmit, the task
    knew one lost send; history held that send's row and the resubmit's (made only by the
    lost install). Reconcile called them "several rows this submit could be", for ever."""
    task = uncertain(a_task(subject))  # attempt 1's answer was lost
    own = history_row(task, job_id="job_1", image_id="img_1", history_id="hist_1")
    own["source_metadata"]["attempt"] = 1
    theirs = history_row(task, job_id="job_2", image_id="img_2", history_id="hist_2")
    theirs["source_metadata"]["attempt"] = 2  # the lost install's resubmit
    if learned != "now":
        Attempt.objects.filter(task=task).update(ember_job_id="job_1")
    history_route(ember, task, [theirs, own])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING, (saved.phase, saved.error)
    assert (saved.ember_job_id, saved.result["image"]["id"]) == ("job_1", "img_1")
    assert list(saved.attempts.values_list("number", "ember_job_id")) == [(1, "job_1")]
    assert "img_2" in saved.error and "still protected in Ember" in saved.error


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
    asset = stored_asset(task=task, ember_image_id="img_2", history_id="")
    # A saved answer that names another image than the one whose bytes are safe.
    task = move(task, TaskState.COPYING, asset=asset, result=ember_result("img_1", "hist_1"))

    drain(worker)

    task, asset = row_of(task), Asset.objects.get(pk=asset.pk)
    assert task.state == TaskState.HISTORY_MISSING
    assert asset.ember_history_id == ""
    assert released_images(fake) == ["img_2"]
    assert fake.file_route.call_count == 0


def test_it_copies_a_missing_original_again_only_from_the_assets_own_image(subject, ember, worker):
    fake = FakeEmber(ember)
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_2")
    asset = generated_asset(task=task, ember_image_id="img_2")  # its file is not on disk
    task = move(task, TaskState.COPYING, asset=asset, result=ember_result("img_1", "hist_1"))
    fake.file_route.mock(return_value=httpx.Response(404))

    drain(worker)

    fetched = [c.request.url.path for c in fake.file_route.calls]
    assert fetched == ["/api/v1/images/img_2/file"]  # never the saved answer's img_1
    assert row_of(task).state == TaskState.COPY_FAILED
    assert released_images(fake) == []  # Ember keeps its protected copy


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


def foreign(row: dict[str, Any], *, app: str = "cwkAvatars", task_id: str = "") -> dict[str, Any]:
    """Return `row` as if another app's, or another task's, generation had made it."""
    meta = {**row["source_metadata"], "source_app": app}
    meta["task_id"] = task_id or "00000000-0000-0000-0000-000000000000"
    return {**row, "source_metadata": meta}


@pytest.mark.parametrize(
    "whose",
    [{"app": "someOtherApp"}, {"task_id": "5a1b5a1b-0000-4000-8000-000000000000"}, {"app": ""}],
    ids=["another app's", "another task's", "no app"],
)
def test_a_history_row_that_does_not_carry_the_task_id_is_never_taken(subject, ember, whose):
    """Found by a review: another app's row was copied as the task's, and released."""
    task = uncertain(a_task(subject))
    stray = foreign(history_row(task, job_id="job_x", image_id="img_x"), **whose)
    history_route(ember, task, [stray])

    reconciled = engine.reconcile(task=task)

    saved = row_of(task)
    assert reconciled.state == saved.state == TaskState.UNCERTAIN
    assert saved.result is None and saved.ember_job_id == ""
    assert "did not carry this task's id" in saved.error
    assert list(saved.attempts.values_list("ember_job_id", flat=True)) == [""]


def test_a_sibling_tasks_row_beside_the_tasks_own_is_left_alone(subject, ember):
    task = uncertain(a_task(subject))
    sibling = a_task(subject)
    mine = history_row(task, job_id="job_8", image_id="img_8")
    theirs = history_row(sibling, job_id="job_9", image_id="img_9")
    history_route(ember, task, [theirs, mine])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING
    assert (saved.ember_job_id, saved.result) == ("job_8", mine["result"])
    assert "job_9" not in saved.error and "did not carry this task's id" in saved.error


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    whose=st.lists(
        st.sampled_from(["mine", "other app", "other task", "no metadata"]), min_size=1, max_size=4
    )
)
def test_reconcile_only_ever_adopts_a_row_that_carries_the_task_id(subject, ember, whose):
    task = uncertain(a_task(subject))
    rows = []
    for n, kind in enumerate(whose):
        # Ids of this example's own: a job an earlier example's task adopted is that task's.
        ids = f"{task.pk.hex[:8]}_{n}"
        row = history_row(task, job_id=f"job_{ids}", image_id=f"img_{ids}", history_id=f"hist_{n}")
        if kind == "other app":
            row = foreign(row, app="someOtherApp", task_id=str(task.pk))
        elif kind == "other task":
            row = foreign(row)
        elif kind == "no metadata":
            row = {k: v for k, v in row.items() if k != "source_metadata"}
        rows.append(row)
    ember.routes.clear()
    history_route(ember, task, rows)

    engine.reconcile(task=task)

    saved = row_of(task)
    carried = [r for r, kind in zip(rows, whose, strict=True) if kind == "mine"]
    if saved.state == TaskState.COPYING:
        assert saved.ember_job_id in {r["job_id"] for r in carried}
    else:
        assert saved.state == TaskState.UNCERTAIN and saved.result is None
    assert len(carried) != 1 or saved.state == TaskState.COPYING  # its one row is taken
