"""Another paid original of a task, left protected in Ember, stays said on the task once it
is done (design §8: "shown on the task").

Found by a review's own Ember: two sends of one task were paid (the first's answer lost, a
person's resubmit), reconcile said "Ember's history also holds another paid original of
this task … Avatars did not copy it and does not release it.", and the worker's `done`
wiped that sentence. Reconcile answers a done task 409, so nothing said it again.
"""

import pytest

from studio import engine
from studio.models import TaskState
from studio.store import update
from tests.factories import plan
from tests.fake_ember import FakeEmber
from tests.worker_drive import drive_once

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = (
    "Ember's history also holds another paid original of this task, still protected in "
    "Ember: job job_1, image img_1. Avatars did not copy it and does not release it."
)


@pytest.mark.parametrize("history", [True, False], ids=["done", "history_missing"])
def test_the_note_of_another_paid_original_outlives_the_copy(subject, ember, worker, history):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    fake.lose_answers = 1
    task = drive_once(worker, task)  # paid, its answer lost
    assert task.state == TaskState.UNCERTAIN, task.phase
    engine.resubmit(task=task, seen_version=task.version, confirmed_not_received=True)
    fake.lose_answers = 1
    task = drive_once(worker, task.__class__.objects.get(pk=task.pk))  # paid again, lost again
    assert task.state == TaskState.UNCERTAIN, task.phase

    reconciled = engine.reconcile(task=task)
    assert reconciled.state == TaskState.COPYING, reconciled.phase
    assert OTHER in reconciled.error
    if not history:  # the answer saved names no history row of its own
        saved = {**reconciled.result, "history": None, "history_error": "Ember wrote no row."}
        reconciled = update(reconciled, result=saved)
    task = drive_once(worker, reconciled)

    assert fake.charged[str(task.pk)] == 2
    assert task.state == (TaskState.DONE if history else TaskState.HISTORY_MISSING), task.phase
    assert task.asset is not None and task.asset.ember_image_id == "img_2"
    assert OTHER in task.error, f"the note went: {task.error!r}"
    if not history:
        assert task.error.startswith("Ember wrote no row."), task.error
