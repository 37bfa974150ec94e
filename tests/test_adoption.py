"""Adoption without a person: the worker searches Ember's history for lost image submits.

An `uncertain` image whose submit's answer was lost is searched at a bounded rate; the
one history row naming the task and its lost attempt is adopted (no new charge), and
anything ambiguous stays `uncertain` for a person, with what was found on the task.
"""

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import engine, holdback
from studio.ember.client import EmberClient
from studio.ember.simulator import Simulator
from studio.engine.adoption import AMBIGUOUS_PHASE, NO_ROW_LATE_PHASE, NO_ROW_PHASE
from studio.models import POLL_BOUND, Attempt, Task, TaskState
from studio.store import move
from studio.worker import RECONCILE_PHASE, Worker
from tests.factories import a_task, batch_request, drain, history_route, history_row, uncertain
from tests.fake_ember import FakeEmber, catch_strays, seen

HISTORY = "/api/v1/history"
EVERY = 300  # seconds, AVATARS_ADOPT_EVERY's default


def a_lost_submit(subject, *, attempt: int = 1, sent: datetime | None = None) -> Task:
    """An image whose submit number `attempt` may have reached Ember: its answer was lost."""
    task = engine.generate(request=batch_request(subject)).tasks.get()
    sent = sent or timezone.now()
    for number in range(1, attempt + 1):
        Attempt.objects.create(
            task=task, number=number, submitted_at=sent, outcome=Attempt.Outcome.UNKNOWN
        )
    return move(task, TaskState.UNCERTAIN, submitted_at=sent, phase=RECONCILE_PHASE)


def row(task: Task, *, attempt: int, job_id: str, image_id: str, **meta: Any) -> dict[str, Any]:
    """Ember's history row for a finished job of `task` sent as attempt `attempt`."""
    return {
        "id": f"hist_{job_id}",
        "job_id": job_id,
        "image_id": image_id,
        "created_at": "2026-01-01T00:00:00Z",
        "source_metadata": {
            "source_app": "cwkAvatars",
            "task_id": str(task.pk),
            "attempt": attempt,
            **meta,
        },
        "result": {
            "image": {"id": image_id, "mime": "image/png", "sha256": "ab" * 32, "bytes": 123},
            "history": {"id": f"hist_{job_id}"},
            "history_error": None,
        },
    }


def history_says(ember, *rows: dict[str, Any]):
    """Answer every history search with `rows`; anything else Ember is asked is on record."""
    route = ember.get(HISTORY).respond(200, json={"items": list(rows)})
    catch_strays(ember)
    return route


def search(at: datetime) -> list[Task]:
    """Run one adoption pass as the worker does, with the clock at `at`."""
    return async_to_sync(engine.adopt_due)(client=EmberClient(), now=at)


def row_of(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def test_it_adopts_the_one_row_naming_the_lost_attempt_and_charges_nothing_more(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    fake.lose_answers = 1
    task = engine.generate(request=batch_request(subject)).tasks.get()
    drain(worker)  # job_1 is accepted and paid for; its 202 never arrives
    lost = row_of(task)
    assert lost.state == TaskState.UNCERTAIN
    assert fake.history_route.call_count == 0  # not searched at once: the job may be running

    search(lost.submitted_at + timedelta(seconds=EVERY))

    adopted = row_of(task)
    assert adopted.state == TaskState.COPYING
    assert adopted.ember_job_id == "job_1"
    assert adopted.result["image"]["id"] == "img_1"
    assert list(adopted.attempts.values_list("number", "ember_job_id")) == [(1, "job_1")]
    assert fake.history_route.call_count == 1
    assert fake.submit_route.call_count == 1  # nothing was sent again
    assert fake.file_route.call_count == fake.release_route.call_count == 0  # the worker copies

    drain(worker)

    done = row_of(task)
    assert done.state == TaskState.DONE and done.asset.ember_image_id == "img_1"
    assert done.asset.ember_history_id == "hist_1"
    assert fake.charges(str(task.pk)) == 1


def test_it_leaves_a_row_of_another_attempt_for_a_person_and_says_what_it_found(subject, ember):
    task = a_lost_submit(subject, attempt=2)
    history_says(ember, row(task, attempt=1, job_id="job_7", image_id="img_7"))

    search(task.submitted_at + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN
    assert (kept.ember_job_id, kept.result) == ("", None)
    assert "a person" in kept.phase
    assert "job_7" in kept.error and "img_7" in kept.error
    assert list(kept.attempts.values_list("ember_job_id", flat=True)) == ["", ""]
    assert seen(ember) == [f"GET {HISTORY}"]


def test_it_leaves_two_rows_for_the_lost_attempt_for_a_person(subject, ember):
    task = a_lost_submit(subject)
    history_says(
        ember,
        row(task, attempt=1, job_id="job_7", image_id="img_7"),
        row(task, attempt=1, job_id="job_8", image_id="img_8"),
    )

    search(task.submitted_at + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN
    assert (kept.ember_job_id, kept.result) == ("", None)
    assert "a person" in kept.phase
    assert "img_7" in kept.error and "img_8" in kept.error
    assert seen(ember) == [f"GET {HISTORY}"]


def test_it_leaves_a_row_naming_two_images_for_a_person(subject, ember):
    task = a_lost_submit(subject)
    confused = row(task, attempt=1, job_id="job_7", image_id="img_7")
    confused["image_id"] = "img_9"  # the row and its answer name different images
    history_says(ember, confused)

    search(task.submitted_at + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN
    assert (kept.ember_job_id, kept.result) == ("", None)
    assert "a person" in kept.phase
    assert seen(ember) == [f"GET {HISTORY}"]


def test_a_row_of_another_task_is_not_this_tasks_and_it_is_searched_again(subject, ember):
    """Found by a review: a row of another task, which Ember's answer also held, was called
    "another paid original of this task" on the task."""
    task = a_lost_submit(subject)
    history_says(
        ember, row(task, attempt=1, job_id="job_7", image_id="img_7", task_id="someone-else")
    )

    search(task.submitted_at + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN and kept.ember_job_id == ""
    assert kept.phase == NO_ROW_PHASE, kept.phase
    assert "a row that did not carry this task's id" in kept.error, kept.error
    assert "paid original" not in kept.error and "img_7" not in kept.error, kept.error
    assert seen(ember) == [f"GET {HISTORY}"]


def test_beside_a_row_of_another_task_it_adopts_its_own_and_says_what_else_came(subject, ember):
    task = a_lost_submit(subject)
    history_says(
        ember,
        row(task, attempt=1, job_id="job_7", image_id="img_7", task_id="someone-else"),
        row(task, attempt=1, job_id="job_8", image_id="img_8"),
    )

    search(task.submitted_at + timedelta(seconds=EVERY))

    adopted = row_of(task)
    assert (adopted.state, adopted.ember_job_id) == (TaskState.COPYING, "job_8")
    assert "a row that did not carry this task's id" in adopted.error, adopted.error
    assert "paid original" not in adopted.error, adopted.error
    assert seen(ember) == [f"GET {HISTORY}"]


def test_its_own_row_listed_twice_is_one_original_and_adopted(subject, ember):
    task = a_lost_submit(subject)
    own = row(task, attempt=1, job_id="job_7", image_id="img_7")
    history_says(ember, own, dict(own))

    search(task.submitted_at + timedelta(seconds=EVERY))

    adopted = row_of(task)
    assert (adopted.state, adopted.ember_job_id) == (TaskState.COPYING, "job_7"), adopted.error
    assert "paid original" not in adopted.error, adopted.error


def test_what_it_leaves_counts_this_tasks_originals_once_each(subject, ember):
    task = a_lost_submit(subject, attempt=2)
    first = row(task, attempt=1, job_id="job_7", image_id="img_7")
    history_says(
        ember,
        first,
        dict(first),
        row(task, attempt=2, job_id="job_8", image_id="img_8"),
        row(task, attempt=2, job_id="job_9", image_id="img_9", task_id="someone-else"),
    )

    search(task.submitted_at + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN and kept.phase == AMBIGUOUS_PHASE
    assert "2 original(s) of this task, 1 naming that attempt" in kept.error, kept.error
    assert "job job_7 (image img_7, attempt 1), job job_8 (image img_8, attempt 2)" in kept.error
    assert "job_9" not in kept.error and "img_9" not in kept.error, kept.error
    assert "a row that did not carry this task's id" in kept.error, kept.error


def test_once_any_job_would_have_finished_no_row_is_said_to_be_a_persons_call(subject, ember):
    """Found by a review (454 kills): submits that never reached Ember rested for ever under
    "the worker looks again", as if the worker would settle them."""
    task = a_lost_submit(subject)
    history_says(ember)

    search(task.submitted_at + timedelta(seconds=POLL_BOUND - 1))
    assert row_of(task).phase == NO_ROW_PHASE
    search(task.submitted_at + timedelta(seconds=POLL_BOUND + EVERY))

    kept = row_of(task)
    assert kept.state == TaskState.UNCERTAIN and kept.ember_job_id == ""
    assert (
        kept.phase
        == NO_ROW_LATE_PHASE
        == (
            "No row in Ember's history long after its job would have finished: the submit may "
            "never have arrived, its job may have failed, or Ember did not write its row. A "
            "person decides whether to resubmit"
        )
    )
    assert len(kept.phase) <= Task._meta.get_field("phase").max_length
    assert kept.attempts.count() == 1, "nothing was sent again"


def test_it_searches_a_task_with_no_row_again_only_after_the_interval(subject, ember):
    task = a_lost_submit(subject)
    route = history_says(ember)
    first = task.submitted_at + timedelta(seconds=EVERY)

    search(task.submitted_at + timedelta(seconds=EVERY - 1))  # too soon after the submit
    assert route.call_count == 0
    search(first)
    search(first + timedelta(seconds=EVERY - 1))
    assert route.call_count == 1
    search(first + timedelta(seconds=EVERY))

    kept = row_of(task)
    assert route.call_count == 2
    assert kept.state == TaskState.UNCERTAIN
    assert kept.phase == "Ember's history has no row for this submit yet; the worker looks again"
    assert seen(ember) == [f"GET {HISTORY}"] * 2


def test_after_a_resubmit_it_waits_the_interval_after_that_submit_not_the_last_search(
    subject, ember
):
    """Found by a review: a person resubmitted a task searched before; its new submit's answer
    was lost too, and the worker searched at once, while that job was still running."""
    task = a_lost_submit(subject)
    route = history_says(ember)
    first = task.submitted_at + timedelta(seconds=EVERY)
    search(first)  # no row for attempt 1
    resent = first + timedelta(seconds=EVERY + 20)  # a person resubmits; the answer is lost
    Attempt.objects.create(
        task=task, number=2, submitted_at=resent, outcome=Attempt.Outcome.UNKNOWN
    )
    Task.objects.filter(pk=task.pk).update(submitted_at=resent)

    search(resent + timedelta(seconds=EVERY - 1))
    assert route.call_count == 1, f"searched {EVERY - 1} s after the resubmit"
    search(resent + timedelta(seconds=EVERY))
    assert route.call_count == 2


def test_it_waits_the_interval_set_in_avatars_adopt_every(subject, ember, settings):
    settings.AVATARS_ADOPT_EVERY = 60
    task = a_lost_submit(subject)
    route = history_says(ember)

    search(task.submitted_at + timedelta(seconds=60))

    assert route.call_count == 1


def test_it_searches_at_most_the_global_cap_per_minute(subject, ember, settings):
    settings.AVATARS_ADOPT_PER_MINUTE = 2
    sent = timezone.now() - timedelta(hours=1)
    tasks = [a_lost_submit(subject, sent=sent) for _ in range(3)]
    route = history_says(ember)
    now = timezone.now()

    search(now)
    search(now + timedelta(seconds=30))
    assert route.call_count == 2
    search(now + timedelta(seconds=61))

    assert route.call_count == 3
    asked = {call.request.url.params["task_id"] for call in route.calls}
    assert asked == {str(t.pk) for t in tasks}  # the third task's turn came next minute


def test_it_never_searches_for_a_task_that_knows_its_job_or_a_clip(subject, ember):
    old = timezone.now() - timedelta(hours=1)
    knows = a_lost_submit(subject, sent=old)
    move(knows, TaskState.UNCERTAIN, ember_job_id="job_1", phase="Ember does not know the job")
    clip = engine.generate(request=batch_request(subject, frames=["clip"])).tasks.get()
    Attempt.objects.create(
        task=clip, number=1, submitted_at=old, outcome=Attempt.Outcome.UNKNOWN, idempotency_key="k"
    )
    move(clip, TaskState.UNCERTAIN, submitted_at=old)
    route = history_says(ember)

    search(timezone.now())

    assert route.call_count == 0


def test_it_searches_from_the_worker_loop_and_a_restarted_worker_does_not_search_again(
    subject, ember, settings
):
    settings.AVATARS_ADOPT_EVERY = EVERY
    task = a_lost_submit(subject, sent=timezone.now() - timedelta(hours=1))
    route = history_says(ember)

    drain(Worker(client=EmberClient(), tick=0, poll_interval=0, adopt_check=0))
    drain(Worker(client=EmberClient(), tick=0, poll_interval=0, adopt_check=0))

    assert route.call_count == 1  # when it last looked is in the database
    assert row_of(task).state == TaskState.UNCERTAIN


@pytest.mark.django_db(transaction=True)
def test_it_finishes_a_lost_202_from_the_simulator_without_anyone_charged_once(subject, settings):
    sim = Simulator(port=0, job_seconds=0).start()
    try:
        settings.EMBER_URL, settings.EMBER_TOKEN = sim.url, "dev-token"
        settings.AVATARS_ADOPT_EVERY = 0  # look as soon as the answer is lost
        with httpx.Client(base_url=sim.url) as control:
            assert control.post("/_sim/config", json={"drop_after_accept": 1}).status_code == 200
            task = engine.generate(request=batch_request(subject)).tasks.get()

            drain(Worker(client=EmberClient(), tick=0, poll_interval=0, adopt_check=0))

            charges = control.get("/_sim/charges").json()
            requests = control.get("/_sim/requests").json()
    finally:
        sim.stop()
    done = row_of(task)
    assert done.state == TaskState.DONE, (done.phase, done.error)
    [attempt] = done.attempts.all()
    # Learned from Ember's history: accepted, not "unknown" beside its job (a kill review).
    assert attempt.outcome == Attempt.Outcome.ACCEPTED and attempt.ember_job_id == done.ember_job_id
    assert done.asset.ember_history_id
    assert charges["charges"] == {str(task.pk): 1}, charges
    submits = [r for r in requests["items"] if r["method"] == "POST"]
    assert len(submits) == 1 and submits[0]["status"] is None  # the one dropped 202


def test_an_image_held_back_by_a_restore_is_searched_and_adopted_without_a_submit(
    subject, ember, settings
):
    """A restore holds back images the backup held as waiting to be sent (studio/restoring.py):
    the lost install may have sent them, so the worker's search must find them."""
    from django.db import connection

    from studio import restoring

    task = engine.generate(request=batch_request(subject)).tasks.get()
    with connection.cursor() as cursor:
        assert restoring.hold_back(cursor, marker="%s") == 1
    held = row_of(task)
    assert (held.state, held.phase) == (TaskState.UNCERTAIN, holdback.HELD_PHASE)
    history_says(ember, row(task, attempt=1, job_id="job_9", image_id="img_9"))
    # The lost install may have sent it just before the restore: its job may still run,
    # and Ember writes a history row once a job has finished.
    assert search(timezone.now()) == []

    [searched] = search(timezone.now() + timedelta(seconds=settings.AVATARS_ADOPT_EVERY))

    assert searched.state == TaskState.COPYING
    assert searched.ember_job_id == "job_9"
    assert seen(ember) == ["GET /api/v1/history"]  # looked up, never sent again


def test_a_row_ember_lists_twice_is_one_original_not_another_paid_one(subject, ember):
    """Found by a review with its own Ember double: the task's own row, listed twice, was
    noted as "another paid original" of the very image being copied."""
    task = uncertain(a_task(subject))
    own = history_row(task, job_id="job_7", image_id="img_7")
    history_route(ember, task, [own, dict(own)])

    reconciled = engine.reconcile(task=task)

    assert reconciled.state == TaskState.COPYING, reconciled.phase
    assert reconciled.ember_job_id == "job_7"
    assert "another paid original" not in reconciled.error, reconciled.error
