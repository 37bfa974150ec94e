"""The worker's history search, over any mix of rows Ember's answer may hold (§8.1).

Whatever else comes with them, it adopts only the task's one original naming the lost
attempt, never another task's or app's row, and never names one of those on the task.
"""

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from studio import engine
from studio.ember.client import EmberClient
from studio.engine.adoption import AMBIGUOUS_PHASE, NO_ROW_PHASE
from studio.models import Attempt, Task, TaskState
from studio.store import move
from studio.worker import RECONCILE_PHASE
from tests.factories import batch_request
from tests.fake_ember import catch_strays, seen

pytestmark = pytest.mark.django_db

HISTORY = "/api/v1/history"
EVERY = 300  # seconds, AVATARS_ADOPT_EVERY's default
LOST = 2  # the attempt whose answer was lost; attempt 1 came before it
KINDS = ["mine", "mine, another image", "earlier attempt", "two images", "other task", "other app"]
FOREIGN = {"other task", "other app"}
OWN_USABLE = {"mine", "mine, another image", "earlier attempt"}


def lost_submit(subject) -> Task:
    task = engine.generate(request=batch_request(subject)).tasks.get()
    sent = task.created_at
    for number in range(1, LOST + 1):
        Attempt.objects.create(
            task=task, number=number, submitted_at=sent, outcome=Attempt.Outcome.UNKNOWN
        )
    return move(task, TaskState.UNCERTAIN, submitted_at=sent, phase=RECONCILE_PHASE)


def history_row(task: Task, kind: str, n: int) -> dict[str, Any]:
    """A row of Ember's history of `kind`; every "mine" is the one same row, listed again."""
    job, image = ("job_mine", "img_mine") if kind == "mine" else (f"job_{n}", f"img_{n}")
    meta = {"source_app": "cwkAvatars", "task_id": str(task.pk), "attempt": LOST}
    if kind == "earlier attempt":
        meta["attempt"] = LOST - 1
    elif kind == "other task":
        meta["task_id"] = "00000000-0000-4000-8000-000000000000"
    elif kind == "other app":
        meta["source_app"] = "someOtherApp"
    return {
        "id": f"hist_{job}",
        "job_id": job,
        "image_id": f"img_{n}_too" if kind == "two images" else image,
        "created_at": "2026-01-01T00:00:00Z",
        "source_metadata": meta,
        "result": {
            "image": {"id": image, "mime": "image/png", "sha256": "ab" * 32, "bytes": 123},
            "history": {"id": f"hist_{job}"},
            "history_error": None,
        },
    }


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(KINDS), max_size=5))
def test_it_adopts_only_the_tasks_one_original_and_never_names_another_tasks_row(
    subject, ember, kinds
):
    Task.objects.all().delete()  # each example's task is the only one lost
    task = lost_submit(subject)
    rows = [history_row(task, kind, n) for n, kind in enumerate(kinds)]
    ember.routes.clear()
    ember.get(HISTORY).respond(200, json={"items": rows})
    catch_strays(ember)
    ember.reset()

    async_to_sync(engine.adopt_due)(
        client=EmberClient(), now=task.submitted_at + timedelta(seconds=EVERY)
    )

    saved = Task.objects.get(pk=task.pk)
    pairs = list(zip(rows, kinds, strict=True))
    own = {row["result"]["image"]["id"] for row, kind in pairs if kind not in FOREIGN}
    naming = [row for row, kind in pairs if kind in ("mine", "mine, another image")]
    assert seen(ember) == [f"GET {HISTORY}"], seen(ember)  # looked up; nothing sent or fetched
    if len(own) == 1 and naming and "two images" not in kinds:
        expected = (TaskState.COPYING, naming[0]["job_id"])
        assert (saved.state, saved.ember_job_id) == expected, (kinds, saved.error)
    else:
        left = (saved.state, saved.ember_job_id, saved.result)
        assert left == (TaskState.UNCERTAIN, "", None), (kinds, saved.error)
        assert saved.phase == (AMBIGUOUS_PHASE if own else NO_ROW_PHASE), (kinds, saved.phase)
    for row, kind in pairs:
        if kind in FOREIGN:
            assert row["job_id"] not in saved.error, (kinds, saved.error)
    if saved.state == TaskState.UNCERTAIN and own:
        usable = {row["result"]["image"]["id"] for row, k in pairs if k in OWN_USABLE}
        assert f"{len(usable)} original(s) of this task" in saved.error, (kinds, saved.error)
