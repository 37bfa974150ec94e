"""Goal: the engine adds little to Ember's own cost.

One worker process (the child) against the real simulator in another process,
over loopback, with zero job time. Rounds alternate between the engine
(generate() a batch, then the real `Worker` drives it to `done`: SQLite WAL +
FULL, originals fsynced) and a bare asyncio client that makes the same Ember
calls per task (submit, poll, fetch, release) at the same concurrency with no
database and no files. Beside the ratio are what the worker costs its database
per task, counted rather than timed (bench/cost.py): SQL statements and commits
(SQLite's statement trace) and hops to its one database thread. The durable-commit
limit is raw SQLite commits per second on the same disk, divided by those commits.
Then the CPU each side spent a task (the engine's rounds plan their batch, as they are
timed), and the simulator's for it: on a machine with few cores the simulator shares
them, so the engine's own CPU is what it costs beside it.
"""

import asyncio
import base64
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from bench import data
from bench.common import (
    Child,
    Context,
    Result,
    SimProcess,
    children,
    cores,
    cpu_ceiling,
    paired_ratio,
    process_cpu_seconds,
)
from bench.cost import WorkerCost
from studio import originals
from studio.ember.client import EmberClient
from studio.engine import validation
from studio.models import Batch, Kind, Subject, Task, TaskState
from studio.worker import Worker, build_payload

TARGET = 0.75
WORKERS = 4  # AVATARS_WORKERS' default, for the engine and the bare client alike
POLL_INTERVAL = 0.05  # seconds; lowered for the run (Ember answers at once here)
TICK = 1.0  # seconds: the pump's own default, unchanged
COUNTED = ("statements", "commits", "hops")  # what the worker costs its database, per task


def run(ctx: Context) -> Result:
    total = ctx.size(2_000, 100)
    per_round = ctx.size(200, 50)
    rounds = total // per_round
    ctx.log(f"throughput: {total} tasks each for the engine and the bare client, {rounds} rounds")
    with (
        SimProcess(ctx, name="throughput-sim", job_seconds=0) as sim,
        children(ctx, __name__, "throughput", EMBER_URL=sim.url) as (child,),
    ):
        child.call("setup")
        counted = child.call("count_cost", tasks=ctx.size(100, 20))
        raw_commits = child.call("raw_commits", commits=ctx.size(1_000, 300))
        times, cpu = _rounds(ctx, child, sim, rounds=rounds, tasks=per_round)
    engine_times, bare_times = times["engine"], times["bare"]
    engine_rate = total / sum(engine_times)
    bare_rate = total / sum(bare_times)
    ratio = paired_ratio(bare_times, engine_times)  # engine rate ÷ bare rate, round by round
    per_task = {name: counted[name] / counted["tasks"] for name in COUNTED}
    limit = raw_commits / per_task["commits"]
    return Result(
        goal="engine vs bare Ember client",
        measured=ratio,
        unit="x",
        target=f"≥ {TARGET:.0%} ({TARGET}x)",
        passed=ratio >= TARGET,
        raw=(
            f"engine {engine_rate:.1f} tasks/s vs bare client {bare_rate:.1f} tasks/s "
            f"({total} tasks each, {rounds} alternating rounds, {WORKERS} at once, "
            f"poll {POLL_INTERVAL} s); per task {per_task['statements']:.1f} statements, "
            f"{per_task['commits']:.1f} commits, {per_task['hops']:.1f} database-thread hops; "
            f"durable-commit limit {limit:.0f} tasks/s "
            f"= {raw_commits:.0f} commits/s ÷ {per_task['commits']:.1f} commits/task; "
            + cpu_text(
                {side: (c / total, s / total) for side, (c, s) in cpu.items()},
                on=cores(),
                needed=TARGET * bare_rate,
            )
        ),
        notes=[
            f"the worker ran {counted['statements']} SQL statements and made "
            f"{counted['commits']} SQLite commits and {counted['hops']} hops to its database "
            f"thread for {counted['tasks']} tasks (pump, sweeps and heartbeats included), "
            f"plus 2 fsyncs per original (file and directory)",
            "the CPU ceiling: the cores ÷ what the worker and the simulator spend a task "
            "together, a rate no scheduling could beat while they share the machine",
        ],
    )


def _rounds(
    ctx: Context, child: Child, sim: SimProcess, *, rounds: int, tasks: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time `rounds` alternating rounds of `tasks` a side; return seconds and CPU, by side.

    The CPU is a pair of sums by side: the child's seconds, the simulator's.
    """
    times: dict[str, list[float]] = {"engine": [], "bare": []}
    cpu = {"engine": [0.0, 0.0], "bare": [0.0, 0.0]}
    order = ["engine", "bare"]
    for index in range(rounds):
        for side in order:
            child_before, sim_before = process_cpu_seconds(child.proc.pid), sim.cpu_seconds()
            times[side].append(child.call(side, tasks=tasks))
            cpu[side][0] += process_cpu_seconds(child.proc.pid) - child_before
            cpu[side][1] += sim.cpu_seconds() - sim_before
        order.reverse()
        ctx.log(
            f"throughput: round {index + 1}: engine {times['engine'][-1]:.2f} s, "
            f"bare {times['bare'][-1]:.2f} s"
        )
    return times, cpu


def cpu_text(per_task: dict[str, tuple[float, float]], *, on: int, needed: float) -> str:
    """Say the CPU a task of each side, in seconds: (the child's, the simulator's) by side.

    Then the rate that CPU allows the engine on `on` cores shared with the simulator,
    beside the rate the goal `needed` (tasks/s).
    """
    (engine, engine_sim), (bare, bare_sim) = per_task["engine"], per_task["bare"]
    ceiling = cpu_ceiling(engine + engine_sim, on=on)
    return (
        f"CPU a task: the worker {engine * 1000:.1f} ms vs the bare client {bare * 1000:.1f} ms, "
        f"the simulator {engine_sim * 1000:.1f} ms vs {bare_sim * 1000:.1f} ms; on {on} "
        f"cores, that CPU allows the engine at most {ceiling:.1f} tasks/s, the goal needs "
        f"{needed:.1f}"
    )


# --- in the child -------------------------------------------------------------

_subject: Subject | None = None
_references: list[dict[str, Any]] = []


def op_setup() -> None:
    global _subject, _references
    data.migrate()
    _subject = data.subject_with_reference()
    frozen = data.request_for(1, _subject)  # the bare client sends the same references
    plan = validation.validate(frozen)
    _references = [
        {
            "name": ref["name"],
            "sha256": ref["sha256"],
            "mime": ref["mime"],
            "data": base64.b64encode(originals.read(ref["sha256"], ref["mime"])).decode("ascii"),
        }
        for ref in plan["references"]
    ]


def op_engine(tasks: int) -> float:
    """Plan `tasks` image tasks and let the real worker drive them to `done`; return seconds."""
    assert _subject is not None
    started = time.perf_counter()
    batches = data.plan(tasks, _subject)
    worker = Worker(workers=WORKERS, poll_interval=POLL_INTERVAL, tick=TICK)
    data.run_once(worker)
    elapsed = time.perf_counter() - started
    _check_done(batches, tasks)
    return elapsed


def op_bare(tasks: int) -> float:
    """Make the same Ember calls for `tasks` tasks with a bare client; return seconds."""
    assert _subject is not None
    started = time.perf_counter()
    asyncio.run(_bare(_payloads(tasks, _subject)))
    return time.perf_counter() - started


def op_count_cost(tasks: int) -> dict[str, int]:
    """Drive `tasks` tasks counting the worker's statements, commits and database-thread hops.

    Run before any timed round: the worker's database thread must open its
    connection while the count is on, for the statement trace to see it.
    """
    assert _subject is not None
    cost = WorkerCost()
    data.plan(tasks, _subject)
    with cost.counting():
        data.run_once(Worker(workers=WORKERS, poll_interval=POLL_INTERVAL, tick=TICK))
    return {
        "tasks": tasks,
        "statements": cost.statements,
        "commits": cost.commits,
        "hops": cost.hops,
    }


def op_raw_commits(commits: int) -> float:
    """Return raw SQLite commits per second, WAL and synchronous=FULL, on the data dir's disk."""
    path = Path(settings.AVATARS_DATA_DIR) / "raw-commits.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, state TEXT, at REAL)")
        started = time.perf_counter()
        for n in range(commits):
            db.execute("INSERT INTO t (state, at) VALUES (?, ?)", (f"state {n}", time.time()))
        return commits / (time.perf_counter() - started)
    finally:
        db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _check_done(batches: list[Batch], tasks: int) -> None:
    done = Task.objects.filter(batch__in=batches, state=TaskState.DONE).count()
    if done != tasks:
        raise RuntimeError(f"only {done} of {tasks} tasks reached done")


def _payloads(tasks: int, subject: Subject) -> Iterator[dict[str, Any]]:
    """Yield the submit bodies the worker would send for the same plan (no database)."""
    request = data.request_for(min(tasks, settings.AVATARS_MAX_TASKS_PER_BATCH), subject)
    sent = 0
    while sent < tasks:
        batch_id = uuid.uuid4()
        for provider in request["providers"]:
            for ordinal in range(1, provider["candidates"] + 1):
                if sent == tasks:
                    return
                task = Task(
                    batch_id=batch_id,
                    kind=Kind.IMAGE,
                    provider=provider["provider"],
                    model=data.PROVIDERS[provider["provider"]]["model"],  # the catalogue's
                    frame="image",
                    ordinal=ordinal,
                    prompt=data.PROMPT,
                    subjects=[subject.pk],
                )
                yield build_payload(task, _references, attempt=1)
                sent += 1


async def _bare(payloads: Iterator[dict[str, Any]]) -> None:
    client = EmberClient()
    try:

        async def lane() -> None:
            for payload in payloads:  # lanes share the iterator: WORKERS tasks at once
                submitted = await client.submit(payload)
                while True:
                    job = await client.poll(submitted.job_id)
                    if job.status in ("succeeded", "failed"):
                        break
                    await asyncio.sleep(POLL_INTERVAL)
                assert job.status == "succeeded" and job.result is not None, job
                image = job.result["image"]
                await client.fetch(image["id"], sha256=image["sha256"])
                if not await client.release(image["id"]):
                    raise RuntimeError("the release was not confirmed")

        await asyncio.gather(*(lane() for _ in range(WORKERS)))
    finally:
        await client.aclose()
