"""What the worker costs its database per image task, counted rather than timed.

The worker's throughput is bound by its one database thread: every statement,
commit and hop to that thread is paid per task. The bounds hold the counts
reached; a change that adds a statement, a commit or a hop to the hot path fails
here, with the figures in the message. Durability is not traded for them: each
state is still committed before the act it names (tests/test_worker_*.py and
the kill points check that), which is why the commits cannot go below six a task.
"""

from contextlib import AbstractContextManager

import pytest
from django.conf import settings

from bench.cost import ThreadTime, WorkerCost
from studio import engine
from studio.ember.client import EmberClient
from studio.models import Asset, Attempt, Task, TaskState
from studio.worker import Worker
from tests.factories import batch_request, drain
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db(transaction=True)  # real commits, as the worker makes them

TASKS = 24  # six times the slots, so the first sweep and the heartbeats weigh little
# Per task. Hops: preparing, submitting, running, copying, the asset row, done, and a
# share of the pump's reads (one a pass; the rows it read beyond the room it had start
# the next freed slots without another). Statements: those reads, the looks for the job
# and the image Ember named among other sends' (named_twice.py), and nine writes (five
# state changes, the attempt, the asset, its subject link and the task's link to it).
# Commits: preparing, submitting, running, copying, the asset row and done, each before
# the act it names; and heartbeats. Measured: 6.5 hops, 11.6 statements, 6.0 commits.
MAX_HOPS = 7.0
MAX_STATEMENTS = 12.0  # every SQL statement but BEGIN, COMMIT and savepoints
MAX_COMMITS = 6.2

SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


def drive_images(subject, ember, watch: AbstractContextManager | None = None) -> WorkerCost:
    """Plan TASKS image tasks and drive them to `done` under `watch`; return what that cost."""
    fake = FakeEmber(ember, first=Attempt.objects.count() + 1)  # its jobs are new ones
    providers = [{"provider": p, "candidates": TASKS // 3} for p in ("openai", "google", "flux")]
    batch = engine.generate(request=batch_request(subject, providers=providers))
    # The bench's worker (4 slots, no poll wait) with a long tick: it sweeps once, on its
    # first pass, since how many sweeps a run makes depends on the clock, not on the tasks.
    worker = Worker(client=EmberClient(), workers=4, poll_interval=0, tick=60, fetch_retry_delay=0)
    cost = WorkerCost()

    with watch or cost.counting():
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


def test_the_thread_time_takes_in_every_hop_and_the_time_the_thread_ran_them(subject, ember):
    timed = ThreadTime()

    drive_images(subject, ember, timed.timing())

    per_task = len(timed.hops) / TASKS
    assert 6 <= per_task <= MAX_HOPS, f"{per_task:.2f} hops timed a task"
    # Each hop's time, seen from the coroutine, includes the thread's run of it.
    assert 0 < timed.busy <= sum(timed.hops), (timed.busy, sum(timed.hops))
    assert timed.median_hop() > 0
    # Afterwards the worker hands its calls to the real `db` again: nothing is timed.
    drive_images(subject, ember)
    assert len(timed.hops) == per_task * TASKS
