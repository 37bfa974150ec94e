"""A job or an image Ember names for two sends is filed under one task at most.

Found by a review with its own Ember double: three jobs whose results named one image left
three tasks `done`, one image released three times and two paid originals never collected;
a history row carrying a task's id but naming another task's job was adopted by two tasks.
"""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import engine
from studio.ember.client import EmberClient
from studio.engine.history_rows import HELD_PHASE
from studio.models import Asset, Attempt, TaskState
from studio.store import update
from studio.worker import Worker, named_twice
from tests.factories import (
    a_task,
    drain,
    generated_asset,
    history_route,
    history_row,
    plan,
    uncertain,
)
from tests.fake_ember import FakeEmber, seen
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db

HELD = "naming a job or an image another task already holds: job {job} (image {image}); not taken"


def test_jobs_whose_results_name_one_image_file_it_under_one_task_only(subject, ember, worker):
    fake = FakeEmber(ember)
    tasks = plan(subject, candidates=3)
    real_poll = fake._poll

    def one_image(request, job_id):  # every job's result names the first job's image
        answer = real_poll(request, job_id)
        fake.jobs[job_id]["result"] = fake.jobs["job_1"]["result"]
        return real_poll(request, job_id) if job_id != "job_1" else answer

    fake.poll_route.mock(side_effect=one_image)

    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0))

    rows = [row_of(task) for task in tasks]
    assert [row.state for row in rows].count(TaskState.DONE) == 1, [r.state for r in rows]
    held = [row for row in rows if row.state == TaskState.UNCERTAIN]
    assert len(held) == 2
    for row in held:
        assert f"names image img_1, which task {rows[0].pk}" in row.error, row.error
        assert "nothing was released" in row.error and row.asset_id is None
    assert Asset.objects.filter(ember_image_id="img_1").count() == 1
    released = seen(ember).count("PATCH /api/v1/explorations/img_1/protection")
    assert released == 1, f"img_1 released {released} times"
    assert len(fake.submits) == 3  # nothing sent again


def test_reconcile_takes_no_row_naming_a_job_another_task_holds(subject, ember):
    holder = a_task(subject)
    Attempt.objects.create(
        task=holder, number=1, ember_job_id="job_7", submitted_at=timezone.now(), outcome="accepted"
    )
    lost = uncertain(a_task(subject))
    history_route(ember, lost, [history_row(lost, job_id="job_7", image_id="img_7")])

    engine.reconcile(task=lost)

    after = row_of(lost)
    assert after.state == TaskState.UNCERTAIN and after.ember_job_id == ""
    assert HELD.format(job="job_7", image="img_7") in after.error, after.error
    assert after.phase == HELD_PHASE, "said there was no row, where there was one not taken"
    assert not after.attempts.exclude(ember_job_id="").exists()


def test_reconcile_takes_no_row_naming_an_image_another_tasks_original_is(subject, ember):
    holder = a_task(subject)

    generated_asset(task=holder, ember_image_id="img_8")
    lost = uncertain(a_task(subject))
    history_route(ember, lost, [history_row(lost, job_id="job_8", image_id="img_8")])

    engine.reconcile(task=lost)

    after = row_of(lost)
    assert after.state == TaskState.UNCERTAIN and after.result in (None, {})
    assert HELD.format(job="job_8", image="img_8") in after.error, after.error
    assert after.phase == HELD_PHASE


def test_the_history_search_adopts_no_job_another_task_holds(subject, ember, settings):
    holder = a_task(subject)
    Attempt.objects.create(
        task=holder, number=1, ember_job_id="job_9", submitted_at=timezone.now(), outcome="accepted"
    )
    lost = uncertain(a_task(subject), sent_ago=timedelta(hours=1))
    row = history_row(lost, job_id="job_9", image_id="img_9")
    row["source_metadata"]["attempt"] = 1
    history_route(ember, lost, [row])

    async_to_sync(engine.adopt_due)(client=EmberClient(), now=timezone.now())

    after = row_of(lost)
    assert after.state == TaskState.UNCERTAIN and after.ember_job_id == ""
    assert HELD.format(job="job_9", image="img_9") in after.error, after.error


def test_reconcile_keeps_the_workers_words_naming_the_held_image_and_the_job(subject, ember):
    """Found by a review with its own Ember double: a reconcile of a task the worker had
    rested (its result named another task's image, and its job to look up) said "no row for
    this task yet" and wrote over those words with a note naming neither."""
    holder = a_task(subject)
    held = generated_asset(task=holder, ember_image_id="img_3")
    lost = update(uncertain(a_task(subject)), ember_job_id="job_4")
    lost = named_twice.rest_image_held(lost, "img_3", held)
    said = lost.error
    history_route(ember, lost, [history_row(lost, job_id="job_4", image_id="img_3")])

    engine.reconcile(task=lost)

    after = row_of(lost)
    assert after.state == TaskState.UNCERTAIN and after.phase == HELD_PHASE
    assert after.error == said and "look job job_4 up there" in said, after.error
