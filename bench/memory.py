"""Goal: the worker's memory is bounded by its slots, not by the batch.

A batch whose image tasks each carry 8 reference photos of about 5 MB (the
most a request may name). The worker process reads its resident set once idle
(recovered, nothing due) and its peak (VmHWM) after driving the whole batch
with 4 slots against the real simulator. The allowance is 3 request bodies per
slot: the photos' bytes, their base64 and the JSON body being sent.
"""

import base64
import io
import json
import os
import random

from django.conf import settings
from PIL import Image

from bench import data
from bench.common import Child, Context, Result, SimProcess, status_kib
from studio import engine, originals
from studio.models import Asset, Origin, Subject, Task, TaskState
from studio.worker import Worker, build_payload

SLOTS = 4  # AVATARS_WORKERS' default
PHOTOS = 8  # the most references one request may name
PER_BODY = 3  # copies of a request body the allowance grants each slot
POLL_INTERVAL = 0.05


def run(ctx: Context) -> Result:
    tasks = ctx.size(16, 8)
    data_dir = ctx.tmp / "memory"
    ctx.log(f"memory: {tasks} tasks with {PHOTOS} photos of ~5 MB each, {SLOTS} slots")
    with SimProcess(ctx, name="memory-sim", job_seconds=0) as sim:
        planner = Child(ctx, "memory-plan", __name__, data_dir=data_dir)
        worker = Child(ctx, "memory-worker", __name__, data_dir=data_dir, EMBER_URL=sim.url)
        try:
            planner.call("setup")
            idle = worker.call("idle")
            body = planner.call("plan", tasks=tasks)
            peak = worker.call("drive", tasks=tasks)
        finally:
            planner.close()
            worker.close()
    allowance = idle + SLOTS * PER_BODY * body / 1024
    return Result(
        goal="worker peak memory per slot",
        measured=(peak - idle) * 1024 / body,
        unit="bodies",
        target=f"≤ {SLOTS * PER_BODY} bodies ({SLOTS} slots x {PER_BODY})",
        passed=peak <= allowance,
        raw=(
            f"peak VmHWM {peak / 1024:.0f} MiB vs idle VmRSS {idle / 1024:.0f} MiB; one request "
            f"body {body / 2**20:.1f} MiB; allowance {allowance / 1024:.0f} MiB ({tasks} tasks)"
        ),
    )


# --- in the child -------------------------------------------------------------


def _photo(seed: int) -> bytes:
    """Return a PNG of about 5 MB: random pixels do not compress."""
    side = 1290  # 1290 x 1290 x 3 bytes ≈ 5 MB
    image = Image.frombytes("RGB", (side, side), random.Random(seed).randbytes(side * side * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


def op_setup() -> int:
    """Migrate and store one subject with 8 large reference photos; return their total bytes."""
    data.migrate()
    subject = engine.create_subject(name="Ada")
    for seed in range(PHOTOS):
        engine.add_reference(subject=subject, data=_photo(seed), file_name=f"big-{seed}.png")
    return sum(a.size for a in Asset.objects.filter(origin=Origin.UPLOADED))


def op_plan(tasks: int) -> int:
    """Plan `tasks` image tasks naming every photo; return one task's request body in bytes."""
    subject = Subject.objects.get()
    request = data.request_for(tasks, subject)
    request["references"] = list(
        Asset.objects.filter(origin=Origin.UPLOADED).values_list("pk", flat=True)
    )
    engine.generate(request=request)
    task = Task.objects.first()
    assert task is not None and len(task.references) == PHOTOS, "every photo is a reference"
    payload = build_payload(task, _read(task), attempt=1)
    return len(json.dumps(payload))


def _read(task: Task) -> list[dict[str, object]]:
    """Return the references as the worker sends them: each photo's bytes in base64."""
    return [
        {
            "name": ref["name"],
            "sha256": ref["sha256"],
            "mime": ref["mime"],
            "data": base64.b64encode(originals.read(ref["sha256"], ref["mime"])).decode("ascii"),
        }
        for ref in task.references
    ]


def op_idle() -> int:
    """Recover with nothing due, as a worker at rest; return VmRSS in KiB."""
    data.run_once(_worker())
    return status_kib(os.getpid())


def op_drive(tasks: int) -> int:
    """Drive the batch to `done`; return the process's peak VmHWM in KiB."""
    data.run_once(_worker())
    done = Task.objects.filter(state=TaskState.DONE).count()
    if done != tasks:
        raise RuntimeError(f"only {done} of {tasks} tasks reached done")
    return status_kib(os.getpid(), "VmHWM")


def _worker() -> Worker:
    settings.AVATARS_PROVIDERS = data.PROVIDERS  # the planner's catalogue
    return Worker(workers=SLOTS, poll_interval=POLL_INTERVAL)
