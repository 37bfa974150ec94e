"""Goal: results arrive promptly.

The real worker with its defaults (3 s poll, 1 s tick, 4 at once) against the
real simulator in its own process, over loopback. Each job gets its own
duration, spread evenly (with jitter, in random order) over one poll cycle past
a short floor, so the jobs end at every point of the worker's poll cycle.
Ember's finish is the moment its job became due (created + its seconds, as the
simulator reckons it); the task's is the `done` write (`updated_at`).
"""

import asyncio
import random
from datetime import datetime, timedelta
from typing import Any

import httpx

from bench import data
from bench.common import Context, Result, SimProcess, children, median
from studio.ember.client import EmberClient
from studio.models import Task, TaskState
from studio.worker import Worker

TARGET = 1.7  # seconds
POLL = 3.0  # seconds: the default poll interval, which this goal is about
FLOOR = 0.5  # seconds: the shortest job, so every job is seen running at least once
SEED = 20_240_611


def run(ctx: Context) -> Result:
    tasks = ctx.size(48, 12)
    ctx.log(f"latency: {tasks} tasks, job times spread over one {POLL:g} s poll cycle")
    with children(ctx, __name__, "latency") as (child,):
        durations = child.call("plan", tasks=tasks, seed=SEED)
        with SimProcess(ctx, name="latency-sim", durations=durations) as sim:
            answer = child.call("drive", ember_url=sim.url)
    latencies = sorted(answer["latencies"])
    value = median(latencies)
    decile = max(1, len(latencies) // 10)
    settings = answer["settings"]
    return Result(
        goal="Ember done → task done (median)",
        measured=value,
        unit="s",
        target=f"≤ {TARGET} s",
        passed=value <= TARGET and settings["poll_interval"] == POLL,
        raw=(
            f"{len(latencies)} tasks, job times {FLOOR} to {FLOOR + POLL:g} s; poll "
            f"{settings['poll_interval']:g} s, tick {settings['tick']:g} s, "
            f"{settings['workers']} at once; min {latencies[0]:.2f} s, "
            f"p10 {latencies[decile - 1]:.2f} s, p90 {latencies[-decile]:.2f} s, "
            f"max {latencies[-1]:.2f} s"
        ),
    )


# --- in the child -------------------------------------------------------------

_durations: dict[str, float] = {}


def op_plan(tasks: int, seed: int) -> dict[str, float]:
    """Plan `tasks` tasks; return the job duration chosen for each (seconds, by task id)."""
    data.migrate()
    subject = data.subject_with_reference()
    ids = [
        str(pk)
        for batch in data.plan(tasks, subject)
        for pk in batch.tasks.values_list("pk", flat=True)
    ]
    rng = random.Random(seed)
    places = list(range(len(ids)))
    rng.shuffle(places)
    _durations.update(
        (task_id, FLOOR + POLL * (place + rng.random()) / len(ids))
        for task_id, place in zip(ids, places, strict=True)
    )
    return _durations


def op_drive(ember_url: str) -> dict[str, Any]:
    """Drive the planned tasks with the worker's defaults; return each Ember-done → done."""
    worker = Worker(client=EmberClient(base_url=ember_url, token="dev-token"))
    worker.lock()  # only the database's owner runs
    try:
        asyncio.run(_drive(worker))
    finally:
        worker.unlock()
    jobs = httpx.get(f"{ember_url}/_sim/jobs", timeout=30).json()["items"]
    finished = {
        str(pk): at
        for pk, at in Task.objects.filter(state=TaskState.DONE).values_list("pk", "updated_at")
    }
    if len(finished) != len(_durations) or len(jobs) != len(_durations):
        raise RuntimeError(f"{len(finished)} of {len(_durations)} tasks done, {len(jobs)} jobs")
    latencies = []
    for job in jobs:
        created = datetime.fromisoformat(job["created_at"])
        due = created + timedelta(seconds=_durations[job["task_id"]])
        latencies.append((finished[job["task_id"]] - due).total_seconds())
    return {
        "latencies": latencies,
        "settings": {
            "poll_interval": worker.poll_interval,
            "tick": worker.tick,
            "workers": worker.workers,
        },
    }


async def _drive(worker: Worker) -> None:
    try:
        await worker.run(once=True)
    finally:
        await worker.client.aclose()
