"""Goal: planning is cheap.

`engine.generate()` of a 200-task batch (validation, frozen references, one
transaction) against a bare bulk insert of the same batch and rows (one
transaction, no validation), alternating in one process on one SQLite file.
"""

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from bench import data
from bench.common import Context, Result, children, median, paired_ratio
from studio import engine
from studio.engine import validation
from studio.models import Batch, Kind, Subject, Task, TaskState

TARGET = 2.0
TASKS = 200


def run(ctx: Context) -> Result:
    rounds = ctx.size(41, 11)
    ctx.log(f"planning: generate() vs bulk insert of {TASKS} tasks, {rounds} alternating rounds")
    with children(ctx, __name__, "planning") as (child,):
        child.call("setup")
        generate_times: list[float] = []
        bare_times: list[float] = []
        sides = [("generate", generate_times), ("bare", bare_times)]
        for _round in range(rounds):
            for op, times in sides:
                times.append(child.call(op))
            sides.reverse()
    ratio = paired_ratio(generate_times, bare_times)
    return Result(
        goal="planning: generate() vs bulk insert",
        measured=ratio,
        unit="x",
        target=f"≤ {TARGET:g}x",
        passed=ratio <= TARGET,
        raw=(
            f"generate() {median(generate_times) * 1e3:.1f} ms vs bare insert "
            f"{median(bare_times) * 1e3:.1f} ms for {TASKS} tasks (medians of {rounds} "
            f"alternating rounds)"
        ),
    )


# --- in the child -------------------------------------------------------------

_subject: Subject | None = None
_request: dict[str, Any] = {}
_rows: list[dict[str, Any]] = []


def op_setup() -> None:
    """Migrate, add a subject with a photo, and prepare the request and its plain rows."""
    global _subject, _request, _rows
    data.migrate()
    _subject = data.subject_with_reference()
    _request = data.request_for(TASKS, _subject, title="planning")
    plan = validation.validate(_request)  # once, here: the bare insert skips validation
    _rows = [
        {
            "kind": Kind.IMAGE,
            "state": TaskState.QUEUED,
            "phase": "Waiting for the worker",
            "provider": entry["provider"],
            "provider_label": entry["label"],
            "model": entry["model"],
            "frame": "image",
            "ordinal": ordinal,
            "prompt": plan["prompt"],
            "subjects": plan["subjects"],
            "references": plan["references"],
        }
        for entry in plan["providers"]
        for ordinal in range(1, entry["candidates"] + 1)
    ]
    assert len(_rows) == TASKS
    op_generate()  # warm both paths (imports, statement caches) before anything is timed
    op_bare()


def op_generate() -> float:
    started = time.perf_counter()
    batch = engine.generate(request=_request)
    elapsed = time.perf_counter() - started
    assert batch.tasks.count() == TASKS
    return elapsed


def op_bare() -> float:
    started = time.perf_counter()
    now = timezone.now()
    with transaction.atomic():
        batch = Batch.objects.create(title="planning", request=_request)
        Task.objects.bulk_create(Task(batch=batch, next_attempt_at=now, **row) for row in _rows)
    return time.perf_counter() - started
