"""The worker (SPEC §6): one owner per database, recovery, the pump, one coroutine per task.

Each task advances one durable state at a time: the state naming a step is
committed before that step is acted on, so a process killed at any line leaves
a row that says how far it got. Database calls run through `sync_to_async`
(one thread, one connection); Ember calls are async; file work runs in threads.
"""

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import QuerySet
from django.utils import timezone

from studio import originals
from studio.ember.client import (
    EmberAuthError,
    EmberBusy,
    EmberClient,
    EmberError,
    EmberNotFound,
    EmberRejected,
    EmberUnavailable,
    Submitted,
)
from studio.models import ACTIVE, Asset, Attempt, Kind, Origin, Task, TaskState, WorkerHeartbeat
from studio.ownership import LOCK_LOST, NotOwner, Ownership, OwnershipLost
from studio.store import Conflict, move, update

log = logging.getLogger("studio.worker")

POLL_BOUND = 1800.0  # seconds after submit; a transport bound, not a verdict on the job
TICK = 1.0  # seconds between pump passes
UNREACHABLE_BACKOFF = 10.0  # seconds before re-sending after nothing reached Ember
AUTH_BACKOFF = 300.0  # seconds; wrong credentials will not fix themselves quickly
RESEND_BACKOFF = 2.0  # seconds before a clip is re-sent under its key
CRASH_BACKOFF = 60.0  # seconds before a task whose step raised is tried again
FETCH_TRIES = 3
FETCH_RETRY_DELAY = 1.0  # seconds, doubled after each failed try
STOP_GRACE = 30.0  # seconds in-flight steps get to record Ember's answer on shutdown
HEARTBEAT_INTERVAL = 5.0  # seconds between the worker's "still alive" writes
DB_RETRY_DELAY = 1.0  # seconds before the pump retries a failed database; doubled each time
DB_RETRY_MAX = 30.0  # seconds; the back-off's ceiling
# What a locked, restarting or unreachable database raises; it passes, so the pump waits.
DB_ERRORS = (OperationalError, InterfaceError)

REFERENCE_CHANGED = "A frozen reference failed its checksum."
MAY_HAVE_REACHED = (
    "The previous submit may have reached Ember. Check history before submitting again."
)
RECONCILE_PHASE = "Reconcile before retry"

P = ParamSpec("P")
R = TypeVar("R")


def db(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run an ORM function on the worker's one database thread."""
    return sync_to_async(fn, thread_sensitive=True)


class Worker:
    """Drives ACTIVE tasks to a resting point; see `run`."""

    def __init__(
        self,
        *,
        client: EmberClient | None = None,
        workers: int | None = None,
        poll_interval: float | None = None,
        poll_bound: float = POLL_BOUND,
        tick: float = TICK,
        fetch_retry_delay: float = FETCH_RETRY_DELAY,
        stop_grace: float = STOP_GRACE,
        db_retry_delay: float = DB_RETRY_DELAY,
    ) -> None:
        self._own_client = client is None
        self.client = client or EmberClient()
        self.workers = workers or settings.AVATARS_WORKERS
        self.poll_interval = (
            settings.AVATARS_POLL_INTERVAL if poll_interval is None else poll_interval
        )
        self.poll_bound = poll_bound
        self.tick = tick
        self.fetch_retry_delay = fetch_retry_delay
        self.stop_grace = stop_grace
        self.in_hand: dict[str, asyncio.Task[None]] = {}
        self.stopping = False
        self._stop_event: asyncio.Event | None = None
        self._slot_freed: asyncio.Event | None = None
        self._recycled_at = float("-inf")  # time.monotonic() of the last connection check
        self._last_beat = float("-inf")  # loop time of the last heartbeat written
        self._last_verified = float("-inf")  # loop time the lock was last checked
        self.db_retry_delay = db_retry_delay
        self._ownership = Ownership()

    # --- ownership ------------------------------------------------------------

    def lock(self) -> None:
        """Become the database's one worker, or raise AlreadyRunning (or NotDurable)."""
        self._ownership.acquire()

    def unlock(self) -> None:
        self._ownership.release()

    # --- waking up after a death -------------------------------------------------

    def recover(self) -> dict[str, int]:
        """Apply the wake-up table to tasks a dead worker left mid-step; return counts."""
        counts = {"temp_files": originals.remove_stale_temp_files()}
        # Nothing left the building from `preparing`; a clip's key makes a restart free.
        counts["preparing"] = 0
        for task in Task.objects.filter(state=TaskState.PREPARING):
            move(task, TaskState.QUEUED, phase="Waiting for the worker")
            counts["preparing"] += 1
        for task in Task.objects.filter(state=TaskState.SUBMITTING):
            if task.kind == Kind.CLIP:
                move(task, TaskState.QUEUED, phase="Re-sending under the same key")
            else:
                with transaction.atomic():
                    _record_unknown_attempt(task, MAY_HAVE_REACHED)
                    move(task, TaskState.UNCERTAIN, phase=RECONCILE_PHASE, error=MAY_HAVE_REACHED)
            counts["submitting"] = counts.get("submitting", 0) + 1
        # `running` resumes polling its job id; `copying` runs finish() again.
        return counts

    # --- the pump --------------------------------------------------------------

    async def run(self, *, once: bool = False) -> None:
        """Recover, then pump until stopped (or, with `once`, until nothing is due or in hand).

        Only the database's owner runs: call `lock()` first (NotOwner otherwise).
        A database that fails (locked, restarting, unreachable) is waited out with
        back-off; losing the lock stops the worker at once (OwnershipLost).
        """
        if not self._ownership.held:
            raise NotOwner()
        self._stop_event = asyncio.Event()
        self._slot_freed = asyncio.Event()
        counts = await db(self.recover)()
        log.info("worker started workers=%s recovered=%s", self.workers, counts)
        started_at = timezone.now()
        delay = self.db_retry_delay
        try:
            while not self.stopping:
                try:
                    started = await self._pass(started_at)
                except DB_ERRORS as exc:
                    log.warning("database error: %s; retrying in %g s", exc, delay)
                    await db(_drop_connection)()
                    await self._sleep(delay)
                    delay = min(delay * 2, DB_RETRY_MAX)
                    continue
                except OwnershipLost:
                    log.error("%s", LOCK_LOST)
                    self._stop_now()
                    raise
                delay = self.db_retry_delay  # the database answers again
                if once and not self.in_hand and started == 0:
                    break
                await self._idle()
        finally:
            await self._drain()
            if self._own_client:
                await self.client.aclose()
            log.info("worker stopped")

    async def _pass(self, started_at: datetime) -> int:
        """One pump pass: the heartbeat and the lock check when due, then `pump`."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_beat >= HEARTBEAT_INTERVAL:
            # One small write every few seconds, not one per task.
            await db(_beat)(started_at)
            self._last_beat = loop.time()
        if self._ownership.can_be_lost and loop.time() - self._last_verified >= self.tick:
            # A worker whose lock went must not start another step (at most once a tick:
            # the pump also passes whenever a slot frees).
            await db(self._ownership.verify)()
            self._last_verified = loop.time()
        return await self.pump()

    async def pump(self) -> int:
        """Reap finished coroutines and start due tasks up to the limit; return how many started."""
        if self._slot_freed is not None:
            self._slot_freed.clear()  # this pass reaps every coroutine that ended until now
        self._reap()
        room = self.workers - len(self.in_hand)
        if room <= 0 or self.stopping:
            return 0
        ids = await db(self._due)(room)
        for task_id in ids:
            job = asyncio.create_task(self.drive(task_id), name=task_id)
            job.add_done_callback(self._freed)
            self.in_hand[task_id] = job
        return len(ids)

    def _due(self, limit: int) -> list[str]:
        checked = time.monotonic()
        # A long-lived worker drops connections that broke or aged out, at most once a
        # tick: the pump also passes whenever a slot frees, and reconnecting for every
        # task would cost more than the query. (A test's transaction is not stale.)
        if not connection.in_atomic_block and checked - self._recycled_at >= self.tick:
            close_old_connections()
            self._recycled_at = checked
        return [str(pk) for pk in self._due_query(timezone.now())[:limit]]

    def _due_query(self, now: datetime) -> "QuerySet[Task, Any]":
        """The pump's query: due ACTIVE tasks not already in hand (served by `task_due_idx`)."""
        rows = Task.objects.due(now).exclude(pk__in=list(self.in_hand))
        return rows.values_list("pk", flat=True)

    def _reap(self) -> None:
        for task_id, job in list(self.in_hand.items()):
            if job.done():
                del self.in_hand[task_id]
                if not job.cancelled() and job.exception() is not None:
                    log.error("task=%s coroutine failed", task_id, exc_info=job.exception())

    def request_stop(self) -> None:
        """Ask the loop to stop (first signal); a second call cancels in-flight work."""
        if self.stopping:
            for job in self.in_hand.values():
                job.cancel()
            return
        self.stopping = True
        if self._stop_event is not None:
            self._stop_event.set()

    def _stop_now(self) -> None:
        """Stop and cancel in-flight work at once, as a second signal does."""
        self.request_stop()
        self.request_stop()

    async def _drain(self) -> None:
        """Let in-flight steps record their outcome (bounded), then cancel what remains.

        Cancelling our coroutines never cancels Ember's jobs: the next start
        resumes polling them by id.
        """
        jobs = list(self.in_hand.values())
        if jobs:
            _done, pending = await asyncio.wait(jobs, timeout=self.stop_grace)
            for job in pending:
                job.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._reap()
        # A cancelled coroutine does not stop the database call it was waiting on: that
        # call still runs on the database thread. A no-op queued on the same thread
        # returns only after it, so the caller releases the lock after the last write.
        await asyncio.shield(db(_nothing)())

    async def _sleep(self, seconds: float) -> None:
        """Sleep, waking early when a stop is requested."""
        if self._stop_event is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), timeout=seconds)

    async def _idle(self) -> None:
        """Wait for the next pump pass: one tick, or less when a stop is asked or a slot frees.

        A freed slot is refilled at once, not at the next tick: otherwise the pump
        starts at most `workers` tasks per tick (4 a second by default) however
        fast Ember answers.
        """
        events = [e for e in (self._stop_event, self._slot_freed) if e is not None]
        if not events:
            await asyncio.sleep(self.tick)
            return
        waits = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waits, timeout=self.tick, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _freed(self, job: "asyncio.Task[None]") -> None:
        """Wake the pump when a coroutine ends cleanly (its slot is free)."""
        # One that raised waits for the tick, so a failing step is not retried in a tight loop.
        if self._slot_freed is not None and not job.cancelled() and job.exception() is None:
            self._slot_freed.set()

    # --- one task ----------------------------------------------------------------

    async def drive(self, task_id: str) -> None:
        """Advance one task through its states until it rests, waits or the worker stops."""
        task = await db(Task.objects.get)(pk=task_id)
        try:
            while not self.stopping and task.state in ACTIVE:
                if task.state == TaskState.QUEUED:
                    if not await self.submit(task):
                        return
                elif task.state == TaskState.RUNNING:
                    if not await self.follow(task):
                        return
                else:
                    await self.finish(task)
        except Conflict:
            log.info("task=%s moved under us; leaving it to the other writer", task_id)
        except Exception as exc:
            # One task's surprise never stops the pump; it waits before being tried again.
            log.exception("task=%s step failed", task_id)
            await db(_postpone)(task_id, f"The worker hit an error: {exc}")

    async def submit(self, task: Task) -> bool:
        """queued → preparing → submitting → POST → the row EMBER.md's table names.

        Returns True when the task went on to `running`.
        """
        await db(move)(
            task, TaskState.PREPARING, expected=task.version, phase="Checking reference photos"
        )
        references = await self.load_references(task)
        if references is None:
            await db(move)(task, TaskState.FAILED, phase="Failed", error=REFERENCE_CHANGED)
            return False
        if self.stopping:
            # Nothing has been sent: a stopping worker does not start a paid request.
            await db(move)(
                task, TaskState.QUEUED, expected=task.version, phase="Waiting for the worker"
            )
            return False
        number = await db(task.attempts.count)() + 1
        payload = build_payload(task, references, attempt=number)
        await db(move)(
            task,
            TaskState.SUBMITTING,
            expected=task.version,
            submitted_at=timezone.now(),
            phase="Sending to Ember",
        )
        try:
            submitted = await self.client.submit(payload, idempotency_key=task.idempotency_key)
        except EmberError as exc:
            # Shielded: Ember's answer is recorded even if we are being cancelled.
            await asyncio.shield(db(_record_refusal)(task, exc, number))
            return False
        await asyncio.shield(db(_record_accepted)(task, submitted, number))
        return True

    async def load_references(self, task: Task) -> list[dict[str, Any]] | None:
        """Read and re-hash each frozen reference; None when one is missing or changed."""
        return await asyncio.to_thread(_read_references, task.references)

    async def follow(self, task: Task) -> bool:
        """Poll a running job until it ends; returns True when it went on to `copying`.

        Errors while polling are transient (EMBER.md): polling goes on within the
        bound, and the latest problem is shown on the task so people see why it waits.
        """
        assert task.submitted_at is not None
        deadline = task.submitted_at + timedelta(seconds=self.poll_bound)
        while not self.stopping:
            if timezone.now() > deadline:
                last = f" Ember's last answer: {task.error}" if task.error else ""
                await db(move)(
                    task,
                    TaskState.UNCERTAIN,
                    phase="Ember did not finish in time; reconcile before retry",
                    error=f"Ember's job {task.ember_job_id} did not finish within "
                    f"{self.poll_bound:.0f} seconds. Nothing was resubmitted.{last}",
                )
                return False
            try:
                job = await self.client.poll(task.ember_job_id)
            except EmberNotFound:
                await db(move)(
                    task,
                    TaskState.UNCERTAIN,
                    phase=RECONCILE_PHASE,
                    error=f"Ember does not know job {task.ember_job_id}. Nothing was resubmitted.",
                )
                return False
            except EmberError as exc:
                log.warning("task=%s poll failed: %s", task.pk, exc.message)
                if task.error != exc.message:  # one write per new problem, not per poll
                    await db(update)(
                        task, phase="Ember's answer was unusable; still polling", error=exc.message
                    )
            else:
                if job.status == "succeeded":
                    await db(move)(
                        task,
                        TaskState.COPYING,
                        result=job.result,
                        phase="Copying the original from Ember",
                        error="",
                    )
                    return True
                if job.status == "failed":
                    await db(move)(
                        task,
                        TaskState.FAILED,
                        phase="Ember could not generate this",
                        error=job.error,
                    )
                    return False
            await self._sleep(self.poll_interval)
        return False

    async def finish(self, task: Task) -> None:
        """Copy first, release last (SPEC §6): the original and its row, then the PATCH."""
        result = task.result or {}
        image = result.get("image") or {}
        history = result.get("history") or {}
        # The asset row and `task.asset` are written in one transaction (record_asset),
        # so the task, read fresh by this coroutine, says whether the bytes are safe.
        asset = None if task.asset_id is None else await db(Asset.objects.get)(pk=task.asset_id)
        if asset is None:
            try:
                original = await self._copy(image)
            except (EmberError, originals.NotAnImage, originals.ChecksumFailed, OSError) as exc:
                await db(move)(
                    task,
                    TaskState.COPY_FAILED,
                    phase="The copy from Ember failed; reconcile to retry",
                    error=getattr(exc, "message", None) or str(exc),
                )
                return
            asset = await db(record_asset)(task, original)
        elif history.get("id") and not asset.ember_history_id:
            # The bytes are already safe: only the history id is new.
            await db(update)(asset, ember_history_id=history["id"])
        released = task.protection_released
        if released is not True:
            released = await self.client.release(image["id"])
        if asset.ember_history_id:
            await db(move)(
                task, TaskState.DONE, phase="Complete", error="", protection_released=released
            )
        else:
            await db(move)(
                task,
                TaskState.HISTORY_MISSING,
                phase="Original saved; history needs repair",
                error=result.get("history_error") or "Ember did not write its history row.",
                protection_released=released,
            )

    async def _copy(self, image: dict[str, Any]) -> originals.Original:
        """Fetch the image and save it as an original, retrying a few times."""
        delay = self.fetch_retry_delay
        for attempt in range(1, FETCH_TRIES + 1):
            try:
                data, _content_type = await self.client.fetch(
                    image["id"], sha256=image.get("sha256")
                )
                return await asyncio.to_thread(originals.save, data)
            except (EmberNotFound, originals.NotDurable):
                # The image is gone, or the disk did not confirm the write: asking
                # again will not bring the image back, and a second fsync proves
                # nothing (the kernel may have dropped the pages it failed to write).
                raise
            except (EmberError, originals.NotAnImage, originals.ChecksumFailed, OSError):
                if attempt == FETCH_TRIES:
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")


# --- steps that touch only the database or files, run in threads ---------------


def build_payload(task: Task, references: list[dict[str, Any]], *, attempt: int) -> dict[str, Any]:
    """Return the asynchronous door's request body for `task` (EMBER.md)."""
    return {
        "kind": task.kind,
        "provider": task.provider,
        "model": task.model or None,
        "prompt": task.prompt,
        "frame": task.frame,
        "references": references,
        "source_metadata": {
            "source_app": "cwkAvatars",
            "purpose": "exploration",
            "batch_id": str(task.batch_id),
            "task_id": str(task.pk),
            "attempt": attempt,
            "subjects": [str(s) for s in task.subjects],
            "frame": task.frame,
            "candidate": task.ordinal,
        },
    }


def _read_references(frozen: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    import base64

    out = []
    for ref in frozen:
        try:
            data = originals.read(ref["sha256"], ref["mime"])
        except (OSError, ValueError, originals.ChecksumFailed):
            return None
        out.append(
            {
                "name": ref["name"],
                "sha256": ref["sha256"],
                "mime": ref["mime"],
                "data": base64.b64encode(data).decode("ascii"),
            }
        )
    return out


def _record_accepted(task: Task, submitted: Submitted, number: int) -> Task:
    """202: the very next write is `running` with the job id, and its Attempt."""
    now = timezone.now()
    with transaction.atomic():
        # A clip re-sent under its key comes back with the same job: the same attempt.
        # (An image's accepted submit is always a new job.)
        replay = (
            task.kind == Kind.CLIP and task.attempts.filter(ember_job_id=submitted.job_id).exists()
        )
        if not replay:
            Attempt.objects.create(
                task=task,
                number=number,
                ember_job_id=submitted.job_id,
                submitted_at=task.submitted_at or now,
                answered_at=now,
                outcome=Attempt.Outcome.ACCEPTED,
            )
        return move(
            task,
            TaskState.RUNNING,
            ember_job_id=submitted.job_id,
            phase="Ember is generating",
            error="",
        )


def _record_refusal(task: Task, exc: EmberError, number: int) -> Task:
    """Record what a failed submit proves, row by row of EMBER.md's Submit outcomes."""
    now = timezone.now()
    if isinstance(exc, EmberUnavailable):
        return move(
            task,
            TaskState.QUEUED,
            due=now + timedelta(seconds=UNREACHABLE_BACKOFF),
            phase="Ember could not be reached; will try again",
            error=exc.message,
        )
    if isinstance(exc, EmberBusy):
        return move(
            task,
            TaskState.QUEUED,
            due=now + timedelta(seconds=exc.retry_after),
            phase=f"Ember is busy; trying again in {exc.retry_after:.0f} s",
            error=exc.message,
        )
    if isinstance(exc, EmberAuthError):
        return move(
            task,
            TaskState.QUEUED,
            due=now + timedelta(seconds=AUTH_BACKOFF),
            phase="Ember refused our credentials; check EMBER_TOKEN",
            error=exc.message,
        )
    if isinstance(exc, EmberRejected | EmberNotFound):
        return move(task, TaskState.FAILED, phase="Ember refused this request", error=exc.message)
    # The request may have reached Ember.
    if task.kind == Kind.CLIP:
        return move(
            task,
            TaskState.QUEUED,
            due=now + timedelta(seconds=RESEND_BACKOFF),
            phase="Ember's answer was lost; re-sending under the same key",
            error=exc.message,
        )
    with transaction.atomic():
        _record_unknown_attempt(task, exc.message, number=number)
        return move(
            task,
            TaskState.UNCERTAIN,
            phase=RECONCILE_PHASE,
            error=f"{MAY_HAVE_REACHED} ({exc.message})",
        )


def _record_unknown_attempt(task: Task, error: str, *, number: int | None = None) -> None:
    """An image submit that may have been paid for is an attempt, with no job id yet."""
    Attempt.objects.create(
        task=task,
        number=number or task.attempts.count() + 1,
        submitted_at=task.submitted_at or timezone.now(),
        outcome=Attempt.Outcome.UNKNOWN,
        error=error,
    )


def record_asset(task: Task, original: originals.Original) -> Asset:
    """Write the generated original's row (with its history id when Ember sent one)."""
    result = task.result or {}
    image = result.get("image") or {}
    history = result.get("history") or {}
    metadata = image.get("metadata") or {}
    with transaction.atomic():
        asset = Asset.objects.create(
            sha256=original.sha256,
            file_name=f"{task.provider}-{task.frame}-{task.ordinal}{original.info.extension}",
            mime=original.info.mime,
            width=original.info.width,
            height=original.info.height,
            size=original.size,
            label=f"{task.provider_label} · {task.frame} #{task.ordinal}",
            origin=Origin.GENERATED,
            references=[r["asset"] for r in task.references],
            task=task,
            batch_id=task.batch_id,
            workflow="exploration",
            ember_image_id=image.get("id", ""),
            ember_history_id=history.get("id", "") or "",
            provider=metadata.get("provider") or task.provider,
            model=metadata.get("model") or task.model,
            prompt=task.prompt,
            upstream=result,
        )
        # A new row has no subjects yet: insert the links without reading them first.
        Asset.subjects.through.objects.bulk_create(
            Asset.subjects.through(asset_id=asset.pk, subject_id=subject_id)
            for subject_id in task.subjects
        )
        update(task, asset=asset)
    return asset


def _beat(started_at: datetime) -> None:
    WorkerHeartbeat.objects.update_or_create(
        pk=1,
        defaults={
            "started_at": started_at,
            "seen_at": timezone.now(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        },
    )


def _drop_connection() -> None:
    """Close this thread's connection after a database error; the next query opens a new one.

    Django keeps a broken connection and fails every later query on it. (Inside a
    test's transaction the connection is not broken, and closing would end it.)
    """
    if not connection.in_atomic_block:
        with contextlib.suppress(DatabaseError):  # a broken one may complain while closing
            connection.close()


def _nothing() -> None:
    """Return at once: awaited on the database thread, it waits for the call ahead of it."""


def _postpone(task_id: str, error: str) -> None:
    """Park a task whose step raised, so it is not retried in a tight loop.

    A task caught in `preparing` goes back to `queued` (nothing was sent); one
    caught in `submitting` is left for the wake-up table, which knows what an
    interrupted submit may mean.
    """
    task = Task.objects.get(pk=task_id)
    state = TaskState.QUEUED if task.state == TaskState.PREPARING else task.state
    if state in ACTIVE:
        due = timezone.now() + timedelta(seconds=CRASH_BACKOFF)
        move(task, TaskState(state), due=due, error=error[:2000])
