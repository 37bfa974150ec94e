"""What the worker costs its database per image task, counted rather than timed.

The worker's throughput is bound by its one database thread: every statement,
commit and hop to that thread is paid per task. The bounds hold the counts
reached; a change that adds a statement, a commit or a hop to the hot path fails
here, with the figures in the message. Durability is not traded for them: each
state is still committed before the act it names (tests/test_worker.py and the
kill points check that), which is why the commits cannot go below six a task.
"""

import pytest
from django.conf import settings

from bench.cost import WorkerCost
from studio import engine
from studio.ember.client import EmberClient
from studio.models import Asset, Task, TaskState
from studio.worker import Worker
from tests.conftest import batch_request, drain
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db(transaction=True)  # real commits, as the worker makes them

TASKS = 24  # three batches' worth of slots: the pump's passes are shared out over many tasks
# Per task, the pump's passes, sweeps and heartbeats included.
MAX_HOPS = 7.5
MAX_STATEMENTS = 10.5  # every SQL statement but BEGIN, COMMIT and savepoints
MAX_COMMITS = 6.2  # six states, each committed before the act it names, and a little pump

SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


def drive_images(subject, ember) -> WorkerCost:
    """Plan TASKS image tasks and drive them to `done` as the throughput bench does."""
    fake = FakeEmber(ember)
    providers = [{"provider": p, "candidates": TASKS // 3} for p in ("openai", "google", "flux")]
    batch = engine.generate(request=batch_request(subject, providers=providers))
    # The bench's worker: 4 slots, the pump's own tick (sweeps once a second), no poll wait.
    worker = Worker(client=EmberClient(), workers=4, poll_interval=0, fetch_retry_delay=0)
    cost = WorkerCost()

    with cost.counting():
        drain(worker)

    states = list(Task.objects.filter(batch=batch).values_list("state", flat=True))
    assert states == [TaskState.DONE] * TASKS
    assert Asset.objects.filter(task__batch=batch).count() == TASKS
    assert len(fake.submits) == TASKS
    return cost


def figures(cost: WorkerCost) -> str:
    per_task = cost.per_task(TASKS)
    return ", ".join(f"{value:.2f} {name}" for name, value in per_task.items()) + " per task"


def test_it_drives_image_tasks_within_its_budget_of_hops_to_the_database_thread(subject, ember):
    cost = drive_images(subject, ember)

    assert cost.hops / TASKS <= MAX_HOPS, figures(cost)


@pytest.mark.skipif(not SQLITE, reason="statements are counted with SQLite's statement trace")
def test_it_drives_image_tasks_within_its_budget_of_statements_and_commits(subject, ember):
    cost = drive_images(subject, ember)

    assert cost.statements / TASKS <= MAX_STATEMENTS, figures(cost)
    assert cost.commits / TASKS <= MAX_COMMITS, figures(cost)
