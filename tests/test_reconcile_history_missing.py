"""Reconcile of a history_missing task: its original saved, only Ember's history row is
left to record (docs/design.md §7)."""

import pytest

from studio import engine, originals
from studio.models import TaskState
from studio.store import move
from tests.factories import (
    a_task,
    ember_result,
    history_route,
    history_row,
    stored_asset,
)
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db


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


@pytest.mark.parametrize("file", ["held", "gone"])
def test_it_says_only_the_history_is_left_when_the_original_is_already_held(subject, ember, file):
    """Found by a review: the phase said "Copying the original" though nothing is fetched;
    and a later one, that the original was held when its file was gone (judged by its row)."""
    task = move(a_task(subject), TaskState.RUNNING, ember_job_id="job_1")
    task = move(task, TaskState.COPYING, result=ember_result(image_id="img_1", history_id=None))
    held = stored_asset(1, task=task, history_id="")
    if file == "gone":
        originals.path_of(held.sha256, held.mime).unlink()
    task = move(task, TaskState.HISTORY_MISSING, asset=held, phase="History needs repair")
    history_route(ember, task, [history_row(task, job_id="job_1", image_id="img_1")])

    engine.reconcile(task=task)

    saved = row_of(task)
    assert saved.state == TaskState.COPYING
    assert saved.phase == (
        "Recording Ember's history entry (the original is already held)"
        if file == "held"
        else "Copying the original from Ember"
    ), saved.phase
