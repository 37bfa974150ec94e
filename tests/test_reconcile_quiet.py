"""A reconcile that learns nothing new writes nothing (found by a review that ran
`reconcile` as cron does, beside the worker's own history search)."""

from datetime import timedelta

import httpx
import pytest

from studio import engine
from studio.ember.errors import EmberError
from studio.engine.recovery import history_unread
from studio.models import POLL_BOUND, TaskState
from studio.phrases import NO_ROW_LATE_PHASE, NO_ROW_PHASE
from studio.store import update
from tests.factories import a_task, history_route, uncertain
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db


def test_a_reconcile_that_finds_no_row_again_leaves_the_task_and_its_version_alone(subject, ember):
    """The version went 79, 80, 81, 82 under one phase, and a person's resubmit
    confirmation was then refused as "changed since the confirmation was shown"."""
    task = uncertain(a_task(subject))
    route = history_route(ember, task, [])
    engine.reconcile(task=task)
    seen = row_of(task)  # a person opens the resubmit confirmation

    for _ in range(3):  # cron
        engine.reconcile(task=row_of(task))

    assert route.call_count == 4
    assert (row_of(task).version, row_of(task).phase) == (seen.version, seen.phase)
    resubmitted = engine.resubmit(task=seen, seen_version=seen.version, confirmed_not_received=True)
    assert resubmitted.state == TaskState.QUEUED


def test_a_reconcile_keeps_the_workers_words_for_the_same_finding(subject, ember):
    """A reconcile's "no row for this task yet" replaced the search's advice, and the two
    took turns as cron and the search ran."""
    task = uncertain(a_task(subject))
    task = update(task, phase=NO_ROW_PHASE)
    history_route(ember, task, [])

    engine.reconcile(task=task)

    assert (row_of(task).phase, row_of(task).version) == (NO_ROW_PHASE, task.version)


def test_past_the_poll_bound_a_reconcile_says_a_person_decides_as_the_search_does(subject, ember):
    task = uncertain(a_task(subject), sent_ago=timedelta(seconds=POLL_BOUND + 60))
    task = update(task, phase=NO_ROW_LATE_PHASE)
    history_route(ember, task, [])

    engine.reconcile(task=task)
    assert (row_of(task).phase, row_of(task).version) == (NO_ROW_LATE_PHASE, task.version)

    fresh = uncertain(a_task(subject), sent_ago=timedelta(seconds=POLL_BOUND + 60))
    history_route(ember, fresh, [])
    engine.reconcile(task=fresh)
    assert row_of(fresh).phase == NO_ROW_LATE_PHASE


def test_a_job_ember_named_is_not_said_to_be_long_finished(subject, ember):
    """Past the poll bound a job Ember accepted may still be running: no row is "yet"."""
    task = uncertain(a_task(subject), sent_ago=timedelta(seconds=POLL_BOUND + 60))
    task = update(task, ember_job_id="job_3")
    task.attempts.update(ember_job_id="job_3")
    history_route(ember, task, [])

    engine.reconcile(task=task)

    assert row_of(task).phase == "Ember's history has no row for this task yet"


def test_a_history_read_whose_answer_did_not_come_is_not_said_as_a_lost_send(subject, ember):
    """Found by a review: "The connection to Ember failed after sending (ReadTimeout)" beside
    a history search read as if a paid submit might have gone out."""
    task = uncertain(a_task(subject))
    ember.get("/api/v1/history").mock(side_effect=httpx.ReadTimeout("slow"))

    with pytest.raises(EmberError) as unread:
        engine.reconcile(task=task)

    assert history_unread(unread.value) == (
        "Ember's history could not be read: its answer did not come (ReadTimeout)"
    )
    assert row_of(task).version == task.version
