"""The worker never puts an id Ember names that is unsafe into a URL path (docs/ember.md)."""

import httpx
import pytest
from django.utils import timezone

from studio.models import Asset, Attempt, TaskState
from studio.store import move
from studio.worker import (
    MAY_HAVE_REACHED,
    RECONCILE_PHASE,
    steps,
)
from tests.factories import drain, plan
from tests.fake_ember import JOBS, FakeEmber, catch_strays, seen
from tests.worker_drive import database_error, drive_once

pytestmark = pytest.mark.django_db


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


@pytest.mark.parametrize(
    "result",
    [
        {"image": {"mime": "image/png", "sha256": "ab" * 32}, "history": {"id": "hist_1"}},
        {"image": "img_1", "history": "hist_1"},
        {"history": {"id": "hist_1"}},
        ["img_1"],
    ],
    ids=["no image id", "not objects", "no image", "not an answer"],
)
def test_a_saved_answer_naming_no_image_rests_uncertain_once_and_sends_nothing(
    subject, ember, worker, result
):
    FakeEmber(ember)
    catch_strays(ember)
    [task] = plan(subject)
    move(task, TaskState.COPYING, ember_job_id="job_1", result=result)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.UNCERTAIN, task.error
    assert task.error.startswith(
        "Ember's saved answer names no image to copy. Nothing more was sent"
    )
    assert task.next_attempt_at is None, "rested, not parked to be tried again"
    assert not Asset.objects.filter(task=task).exists()
    assert seen(ember) == []
