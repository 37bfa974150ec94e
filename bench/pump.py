"""Goal: the pump's poll does not grow with history.

Two installs side by side, one with 1k finished tasks and one with 200k, both
holding the same active set (due, backed-off and in-hand tasks, same ids, same
relative times). Each times the worker's own query (`Worker._due_query`, as
`_due` runs it every pump pass) in alternating rounds; the plan SQLite chose
for it is printed, and the row fails unless it goes through `task_due_idx`.
"""

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from bench import data
from bench.common import Context, Result, call_all, children, median, paired_ratio
from studio.models import Batch, Subject, Task, TaskState
from studio.worker import Worker

TARGET = 1.1
LIMIT = 4  # room the pump asks for: AVATARS_WORKERS' default
IN_HAND = 4  # running tasks the worker already drives (excluded by the query)
DUE = 100  # queued and copying tasks whose next attempt has come
BACKED_OFF = 30  # queued tasks waiting out a back-off
# The active set is the same in both installs: fixed ids, fixed times.
ACTIVE_NAMESPACE = uuid.UUID("5d1f3c9e-0000-4000-8000-000000000000")


def run(ctx: Context) -> Result:
    history = ctx.size(200_000, 20_000)
    base = 1_000
    rounds = ctx.size(21, 9)
    calls = ctx.size(400, 200)
    ctx.log(f"pump: building installs with {base:,} and {history:,} finished tasks")
    with children(ctx, __name__, "pump-small", "pump-big") as (small, big):
        call_all([(small, "setup", {"history": base}), (big, "setup", {"history": history})])
        ctx.log(f"pump: timing _due({LIMIT}) x{calls}, {rounds} alternating rounds")
        small_times: list[float] = []
        big_times: list[float] = []
        full: list[float] = []
        picked: set[tuple[str, ...]] = set()
        sides = [(small, small_times), (big, big_times)]
        for _round in range(rounds):
            for child, times in sides:
                answer = child.call("time", calls=calls)
                times.append(answer["median"])
                full.append(answer["full"])
                picked.add(tuple(answer["ids"]))
            sides.reverse()  # whoever went second goes first next round
        plan = big.call("plan")
    ratio = paired_ratio(big_times, small_times)
    uses_index = "task_due_idx" in plan
    notes = []
    if len(picked) != 1:
        notes.append(f"WARNING: the two installs picked different tasks: {sorted(picked)}")
    if not uses_index:
        notes.append("WARNING: the plan does not go through task_due_idx alone")
    return Result(
        goal="pump poll vs history",
        measured=ratio,
        unit="x",
        target=f"≤ {TARGET}x",
        passed=ratio <= TARGET and uses_index and len(picked) == 1,
        raw=(
            f"query median {median(small_times) * 1e6:.0f} µs with {base // 1000}k finished "
            f"vs {median(big_times) * 1e6:.0f} µs with {history // 1000}k "
            f"({rounds} alternating rounds x {calls}); whole `_due()` "
            f"≈ {median(full) * 1e3:.2f} ms; plan: {_short(plan)}"
        ),
        notes=notes,
    )


def _short(plan: str) -> str:
    """Keep the plan's words, not SQLite's node numbers."""
    return "; ".join(line.lstrip("0123456789 ") for line in plan.splitlines() if line.strip())


# --- in the child -------------------------------------------------------------

_worker: Worker | None = None


def op_setup(history: int) -> dict[str, int]:
    """Migrate, write `history` finished tasks, then the active set (newest, as in life)."""
    data.migrate()
    subject = data.subject_with_reference()
    data.add_history(history, subject, assets=False)
    running = _add_active_set(subject)
    global _worker
    _worker = Worker(workers=LIMIT)
    # The pump excludes what it already drives; only the keys are read.
    _worker.in_hand.update((pk, cast("asyncio.Task[None]", None)) for pk in running)
    return {"tasks": Task.objects.count(), "active": Task.objects.active().count()}


def op_time(calls: int) -> dict[str, Any]:
    """Run the pump's query `calls` times; return the median time and what it picked.

    Times the query itself (`_due_query`, evaluated as `_due` evaluates it); `_due`
    may also recycle the connection (`close_old_connections`, at most once a tick),
    a fixed cost that would only hide growth. The whole call is timed too, for the
    record.
    """
    assert _worker is not None
    query = []
    ids: list[str] = []
    for _ in range(calls):
        started = time.perf_counter()
        ids = [str(task.pk) for task in _worker._due_query(timezone.now())[:LIMIT]]
        query.append(time.perf_counter() - started)
    full = []
    for _ in range(max(10, calls // 10)):
        started = time.perf_counter()
        _worker._due(LIMIT)
        full.append(time.perf_counter() - started)
    return {"median": median(query), "full": median(full), "ids": ids}


def op_plan() -> str:
    """Return SQLite's plan for the query the pump really runs (bound parameters and all)."""
    assert _worker is not None
    return _worker._due_query(timezone.now())[:LIMIT].explain()


def _add_active_set(subject: Subject) -> list[str]:
    """Write the same ACTIVE tasks in every install; return the ids of those in hand."""
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    batch = Batch(
        id=uuid.uuid5(ACTIVE_NAMESPACE, "batch"), title="active", request={"prompt": data.PROMPT}
    )
    rows = []
    # The ones in hand are the oldest: the query must skip them, not stop at them.
    plan = (
        [(TaskState.RUNNING, start)] * IN_HAND
        + [(TaskState.QUEUED, start + timedelta(seconds=10))] * (DUE - 10)
        + [(TaskState.COPYING, start + timedelta(seconds=5))] * 10
        + [(TaskState.QUEUED, start + timedelta(days=1))] * BACKED_OFF
    )
    for n, (state, due) in enumerate(plan):
        rows.append(
            Task(
                id=uuid.uuid5(ACTIVE_NAMESPACE, f"task-{n}"),
                batch=batch,
                state=state,
                provider="openai",
                provider_label="GPT Image",
                model="gpt-image-1",
                frame="image",
                ordinal=n % 8 + 1,
                prompt=data.PROMPT,
                subjects=[subject.pk],
                next_attempt_at=due + timedelta(milliseconds=n),
                submitted_at=start if state != TaskState.QUEUED else None,
                ember_job_id=f"job_active_{n}" if state != TaskState.QUEUED else "",
            )
        )
    with transaction.atomic():
        batch.save()
        Task.objects.bulk_create(rows)
    return [str(row.pk) for row in rows[:IN_HAND]]
