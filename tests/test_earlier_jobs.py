"""A done task's earlier job that Ember accepted and finished late: a reconcile names its
paid original (studio/engine/earlier_jobs.py).

Found by a kill review: a job that did not finish within the poll bound sent its task to
`uncertain`; a person resubmitted it, the new job was copied and the task done. The first
job then succeeded, and its paid original stayed protected in Ember, never copied, named
by nothing, on no list, and `reconcile` refused the done task.
"""

import io
import time

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from studio import engine
from studio.ember.client import EmberClient
from studio.ember.simulator import Simulator
from studio.engine.lost_sends import NOTHING_ELSE, STILL_RUNNING, unlooked
from studio.models import Attempt, Task, TaskState
from studio.store import move, update
from studio.worker import Worker
from tests.admin_pages import changelist
from tests.factories import (
    a_task,
    batch_request,
    drain,
    ember_result,
    history_route,
    history_row,
    resubmitted_and_done,
    stored_asset,
)
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db

JOB = "/api/v1/api-generators/jobs/job_1"
TIMED_OUT = "Ember's job job_1 did not finish within 1800 seconds"


def timed_out_then_resubmitted(subject) -> Task:
    """A done task whose first job Ember accepted and did not finish in time; a person's
    resubmit (job_2) made the original the archive holds."""
    task = resubmitted_and_done(subject)
    first = task.attempts.get(number=1)
    update(first, ember_job_id="job_1", outcome=Attempt.Outcome.ACCEPTED, error=TIMED_OUT)
    return row_of(task)


def own_row_only(ember, task: Task) -> None:
    """Ember's history holds the resubmit's row alone (the first job's not written yet)."""
    own = history_row(task, job_id="job_2", image_id="img_1", history_id="hist_1")
    history_route(ember, task, [own])


def test_a_reconcile_names_the_late_jobs_paid_original_and_the_task_stays_done(
    admin_client, subject, ember
):
    task = timed_out_then_resubmitted(subject)
    own_row_only(ember, task)
    asked = ember.get(JOB).respond(
        200, json={"id": "job_1", "status": "succeeded", "result": ember_result("img_9", "h9")}
    )
    listed = admin_client.get(changelist(Task), {"left_in_ember": "lost"}).content.decode()
    assert str(task.pk) in listed and engine.lost_sends(task)

    engine.reconcile(task=task)

    saved = row_of(task)
    assert (saved.state, saved.asset_id) == (TaskState.DONE, task.asset_id)
    assert (
        "another paid original of this task, still protected in Ember: job job_1, image img_9"
    ) in saved.error
    shown = admin_client.get(changelist(Task), {"left_in_ember": "yes"}).content.decode()
    assert str(task.pk) in shown
    assert not engine.lost_sends(saved)  # named now: not listed again, not asked again
    again = engine.reconcile(task=saved)
    assert (again.error, again.version, asked.call_count) == (saved.error, saved.version, 1)


def test_a_job_still_under_way_is_said_so_and_one_that_failed_is_recorded(subject, ember):
    task = timed_out_then_resubmitted(subject)
    own_row_only(ember, task)
    ember.get(JOB).respond(200, json={"id": "job_1", "status": "running"})
    out = io.StringIO()

    call_command("reconcile", str(task.pk), stdout=out)

    assert STILL_RUNNING.format(jobs="job job_1") in out.getvalue(), out.getvalue()
    assert engine.lost_sends(row_of(task))  # still to be looked for
    failed = {"code": "provider_error", "message": "The provider gave up."}
    ember.get(JOB).respond(200, json={"id": "job_1", "status": "failed", "error": failed})
    out = io.StringIO()

    call_command("reconcile", str(task.pk), stdout=out)

    assert f"{task.pk} done: {NOTHING_ELSE}" in out.getvalue(), out.getvalue()
    first = row_of(task).attempts.get(number=1)
    assert first.outcome == Attempt.Outcome.FAILED and "The provider gave up." in first.error
    assert not engine.lost_sends(row_of(task)) and row_of(task).error == ""


def test_an_ordinary_done_task_and_one_whose_earlier_job_failed_are_not_listed(
    admin_client, subject
):
    ordinary = a_task(subject)
    Attempt.objects.create(
        task=ordinary,
        number=1,
        submitted_at=timezone.now(),
        ember_job_id="job_5",
        outcome=Attempt.Outcome.ACCEPTED,
    )
    ordinary = move(ordinary, TaskState.RUNNING, ember_job_id="job_5", phase="Ember is generating")
    move(ordinary, TaskState.DONE, asset=stored_asset(5, task=ordinary), phase="Complete")
    failed_first = timed_out_then_resubmitted(subject)
    update(failed_first.attempts.get(number=1), outcome=Attempt.Outcome.FAILED)
    late = timed_out_then_resubmitted(subject)

    listed = admin_client.get(changelist(Task), {"left_in_ember": "lost"}).content.decode()

    assert str(late.pk) in listed
    assert str(ordinary.pk) not in listed and str(failed_first.pk) not in listed
    assert not engine.lost_sends(row_of(ordinary)) and not engine.lost_sends(row_of(failed_first))


def test_a_done_task_that_does_not_know_its_own_job_takes_its_latest_send_for_it(
    admin_client, subject
):
    """Found by a re-review: a done task with no job id of its own had its own finished job
    listed as an earlier send, said at every reconcile to be unfinished."""
    alone = timed_out_then_resubmitted(subject)
    alone.attempts.get(number=1).delete()  # its own send alone, under job_2
    alone = update(row_of(alone), ember_job_id="")
    late = update(timed_out_then_resubmitted(subject), ember_job_id="")

    listed = admin_client.get(changelist(Task), {"left_in_ember": "lost"}).content.decode()

    assert str(alone.pk) not in listed and not engine.lost_sends(row_of(alone))
    assert str(late.pk) in listed  # its first job, job_1, is still an earlier one
    assert [a.ember_job_id for a in unlooked(row_of(late))] == ["job_1"]


@pytest.mark.django_db(transaction=True)
def test_the_real_worker_and_simulator_a_late_job_is_named_after_the_resubmit(subject, settings):
    """The review's steps end to end, with the poll bound shrunk to half a second: the job
    outlives it, a person resubmits, the new job is copied, the first one then succeeds."""
    sim = Simulator(port=0, job_seconds=2.0).start()
    try:
        settings.EMBER_URL, settings.EMBER_TOKEN = sim.url, "dev-token"
        task = engine.generate(request=batch_request(subject)).tasks.get()
        drain(Worker(client=EmberClient(), tick=0, poll_interval=0.05, poll_bound=0.5))
        waited = row_of(task)
        assert waited.state == TaskState.UNCERTAIN, (waited.state, waited.phase)
        with httpx.Client(base_url=sim.url) as control:
            control.post("/_sim/config", json={"job_seconds": 0}).raise_for_status()
            engine.resubmit(task=waited, seen_version=waited.version, confirmed_not_received=True)
            drain(Worker(client=EmberClient(), tick=0, poll_interval=0.05))
            time.sleep(2.0)  # the first job's two seconds run out: it succeeds
            engine.reconcile(task=row_of(task))
            images = control.get("/_sim/images").json()["items"]
            charges = control.get("/_sim/charges").json()["charges"]
    finally:
        sim.stop()

    done = row_of(task)
    first = done.attempts.get(number=1)
    held = [i for i in images if i["id"] == done.asset.ember_image_id]
    other = [i for i in images if i["id"] != done.asset.ember_image_id]
    assert done.state == TaskState.DONE and charges == {str(task.pk): 2}  # a person's choice
    assert len(held) == 1 and len(other) == 1, images
    assert f"job {first.ember_job_id}, image {other[0]['id']}" in done.error, done.error
    assert other[0]["protected"], "Ember let go of an original Avatars never copied"
