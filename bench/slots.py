"""Goal: throughput grows with slots; the pump keeps every slot busy.

The real simulator runs every job for one second. For each slot count
(`AVATARS_WORKERS` 4, 16 and 64) a fresh worker process plans `rounds x slots`
image tasks and drives them all to `done`; the ideal is `slots` jobs a second
(every slot always holding a job), so the measured throughput is divided by
`slots / job time`. Polling is every 0.1 s, so a job is seen done within a tenth
of its length; what is left is the worker's own cost per task (submit, the
durable states, fetch, hash and fsync, release), done by one database thread.

Beside each share is what would say where the time went: the share of the run
the database thread was busy and how long a hop to it took (median), and the CPU
the worker spent a task and the simulator a job (both on this machine's cores).
"""

import os
import time
from typing import Any

from bench import data
from bench.common import (
    Child,
    Context,
    Result,
    SimProcess,
    cores,
    cpu_ceiling,
    process_cpu_seconds,
)
from bench.cost import ThreadTime
from studio.models import Task, TaskState
from studio.worker import Worker

TARGET = 0.9
SLOTS = (4, 16, 64)
JOB_SECONDS = 1.0
POLL_INTERVAL = 0.1  # seconds: a finished job waits at most this long to be seen


def run(ctx: Context) -> Result:
    rounds = ctx.size(5, 3)
    figures: dict[int, dict[str, float]] = {}
    with SimProcess(ctx, name="slots-sim", job_seconds=JOB_SECONDS) as sim:
        for slots in SLOTS:
            ctx.log(f"slots: {slots} slots, {rounds * slots} one-second jobs")
            child = Child(ctx, f"slots-{slots}", __name__, EMBER_URL=sim.url)
            try:
                before = sim.cpu_seconds()
                figures[slots] = child.call("drive", slots=slots, tasks=rounds * slots)
                figures[slots]["sim_cpu"] = (sim.cpu_seconds() - before) / (rounds * slots)
            finally:
                child.close()
    shares = {slots: f["rate"] / (slots / JOB_SECONDS) for slots, f in figures.items()}
    worst = min(shares.values())
    return Result(
        goal="throughput with 4, 16, 64 slots",
        measured=worst,
        unit="x",
        target=f"each ≥ {TARGET:.0%} of slots ÷ job time",
        passed=all(share >= TARGET for share in shares.values()),
        raw="; ".join(describe(slots, f, on=cores()) for slots, f in figures.items()),
        notes=[
            f"jobs take {JOB_SECONDS:.0f} s in the simulator; the worker polls every "
            f"{POLL_INTERVAL} s; the measured figure is the lowest share",
            "a hop: from asking for the database thread to having its answer back; the "
            "simulator's CPU includes drawing each job's image; \"at most\": the cores ÷ the "
            "CPU the worker and the simulator spend a task together",
        ],
    )


def describe(slots: int, f: dict[str, Any], *, on: int) -> str:
    """Return one slot count's figures as the table prints them (`on`: the machine's cores)."""
    ceiling = cpu_ceiling(f["cpu"] + f["sim_cpu"], on=on)
    return (
        f"{slots} slots: {f['rate']:.1f} tasks/s of {slots / JOB_SECONDS:.0f} "
        f"({f['rate'] / (slots / JOB_SECONDS):.0%}, {f['tasks']:.0f} tasks in "
        f"{f['seconds']:.1f} s; database thread busy {f['db_busy']:.0%}, "
        f"a hop {f['hop'] * 1000:.0f} ms; CPU a task: worker {f['cpu'] * 1000:.0f} ms, "
        f"simulator {f['sim_cpu'] * 1000:.0f} ms, at most {ceiling:.0f} tasks/s on {on} cores)"
    )


# --- in the child -------------------------------------------------------------


def op_drive(slots: int, tasks: int) -> dict[str, float]:
    """Plan `tasks` image tasks, then time one worker with `slots` slots driving them all."""
    data.migrate()
    subject = data.subject_with_reference()
    data.plan(tasks, subject)
    thread = ThreadTime()
    cpu = process_cpu_seconds(os.getpid())
    started = time.perf_counter()
    with thread.timing():
        data.run_once(Worker(workers=slots, poll_interval=POLL_INTERVAL))
    seconds = time.perf_counter() - started
    cpu = process_cpu_seconds(os.getpid()) - cpu
    done = Task.objects.filter(state=TaskState.DONE).count()
    if done != tasks:
        raise RuntimeError(f"only {done} of {tasks} tasks reached done")
    return {
        "tasks": tasks,
        "seconds": seconds,
        "rate": tasks / seconds,
        "db_busy": thread.busy / seconds,
        "hop": thread.median_hop(),
        "cpu": cpu / tasks,
    }
