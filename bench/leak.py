"""Goal: the worker does not leak.

One process plans 5,000 image tasks and exits; then a fresh process (the
worker process, nothing else in it) runs the real `Worker` against the
simulator in a third process. It reads its own resident set size (VmRSS) when
500 tasks are done and again when all 5,000 are, without stopping in between.
"""

import asyncio
import os

from asgiref.sync import sync_to_async

from bench import data
from bench.common import Child, Context, Result, SimProcess, status_kib
from studio.models import Task, TaskState
from studio.worker import Worker

TARGET = 1.1
WORKERS = 16  # more at once than the default, so 5,000 tasks take minutes, not ten
POLL_INTERVAL = 0.05  # seconds; Ember answers at once here
WATCH_EVERY = 0.1  # seconds between looks at how many tasks are done
DEADLINE = 900.0  # seconds; a run this slow has gone wrong


def run(ctx: Context) -> Result:
    total = ctx.size(5_000, 1_000)
    early = total // 10
    data_dir = ctx.tmp / "leak"
    ctx.log(f"leak: planning {total} tasks, then one worker process drives them all")
    with SimProcess(ctx, name="leak-sim", job_seconds=0) as sim:
        planner = Child(ctx, "leak-plan", __name__, data_dir=data_dir)
        try:
            planner.call("plan", tasks=total)
        finally:
            planner.close()
        worker = Child(ctx, "leak-worker", __name__, data_dir=data_dir, EMBER_URL=sim.url)
        try:
            # A reading at every tenth of the run shows a slow climb as well as the two ends.
            readings = worker.call("drive", checkpoints=[early * n for n in range(1, 11)])
        finally:
            worker.close()
    first, last = readings[0], readings[-1]
    ratio = last["rss"] / first["rss"]
    curve = ", ".join(f"{r['done']:,}: {r['rss'] / 1024:.1f}" for r in readings)
    return Result(
        goal="worker RSS, late vs early",
        measured=ratio,
        unit="x",
        target=f"≤ {TARGET}x",
        passed=ratio <= TARGET,
        raw=(
            f"VmRSS {first['rss'] / 1024:.1f} MiB after {first['done']:,} tasks done vs "
            f"{last['rss'] / 1024:.1f} MiB after {last['done']:,} (same process, "
            f"{WORKERS} at once, {last['seconds']:.0f} s; peak VmHWM {last['hwm'] / 1024:.1f} MiB)"
        ),
        notes=[f"VmRSS (MiB) by tasks done: {curve}"],
    )


# --- in the child -------------------------------------------------------------


def op_plan(tasks: int) -> int:
    """Migrate and plan `tasks` image tasks in batches of 200."""
    data.migrate()
    subject = data.subject_with_reference()
    data.plan(tasks, subject)
    return Task.objects.count()


def op_drive(checkpoints: list[int]) -> list[dict[str, float]]:
    """Run the worker; read VmRSS each time the done count passes a checkpoint, then stop."""
    worker = Worker(workers=WORKERS, poll_interval=POLL_INTERVAL)
    worker.lock()  # only the database's owner runs
    try:
        return asyncio.run(_drive(worker, sorted(checkpoints)))
    finally:
        worker.unlock()


async def _drive(worker: Worker, checkpoints: list[int]) -> list[dict[str, float]]:
    readings: list[dict[str, float]] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    count_done = sync_to_async(_count_done, thread_sensitive=True)

    async def watch() -> None:
        try:
            while len(readings) < len(checkpoints):
                done = await count_done()
                if done >= checkpoints[len(readings)]:
                    readings.append(
                        {
                            "done": done,
                            "rss": status_kib(os.getpid()),
                            "hwm": status_kib(os.getpid(), "VmHWM"),
                            "seconds": loop.time() - started,
                        }
                    )
                elif loop.time() - started > DEADLINE:
                    raise RuntimeError(f"only {done} tasks done after {DEADLINE:.0f} s")
                else:
                    await asyncio.sleep(WATCH_EVERY)
        finally:
            worker.request_stop()

    watcher = asyncio.create_task(watch())
    await worker.run()
    await watcher
    return readings


def _count_done() -> int:
    return Task.objects.filter(state=TaskState.DONE).count()
