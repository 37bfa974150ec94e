"""The worker (docs/design.md §6): one owner, recovery, the pump, one coroutine per task.

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
from datetime import UTC, datetime, timedelta
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
    EmberTooLarge,
    EmberUnavailable,
    EmberUnsafeId,
    Job,
    Submitted,
)
from studio.models import (
    ACTIVE,
    POLL_BOUND,
    Asset,
    Attempt,
    Kind,
    Origin,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.ownership import LOCK_LOST, NotOwner, Ownership, OwnershipLost
from studio.store import Conflict, move, update

log = logging.getLogger("studio.worker")

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
UNSAFE_ID_PHASE = "Ember named an id Avatars will not use; look the job up in Ember"
NOTHING_MORE_SENT = (
    "Nothing more was sent to Ember for this task: its paid original may still be protected there."
)

# What a submit got back: a job, a typed refusal, or None when the answer could not be read.
Answer = Submitted | EmberError | None

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
        self._swept_at = float("-inf")  # time.monotonic() of the last sweep
        # Ember's answers whose recording failed, by task id, until the task is settled.
        self.unrecorded: dict[str, Answer] = {}
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
        counts.update(_wake_stranded(in_hand=[], answers={}))
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
        """Reap, settle stranded tasks, start due ones up to the limit; return how many started."""
        if self._slot_freed is not None:
            self._slot_freed.clear()  # this pass reaps every coroutine that ended until now
        self._reap()
        await self.sweep()
        room = self.workers - len(self.in_hand)
        if room <= 0 or self.stopping:
            return 0
        ids = await db(self._due)(room)
        for task_id in ids:
            job = asyncio.create_task(self.drive(task_id), name=task_id)
            job.add_done_callback(self._freed)
            self.in_hand[task_id] = job
        return len(ids)

    async def sweep(self) -> None:
        """Settle tasks left `preparing`/`submitting` that no coroutine holds (once a tick).

        Only a coroutine holds those states; one that ended without moving its task on
        (a write that failed, say) would leave it where nothing moves it while this
        worker lives. Ember's answer, when one came, decides where it goes.
        """
        now = time.monotonic()
        if now - self._swept_at < self.tick:
            return
        self._swept_at = now
        answers = dict(self.unrecorded)
        try:
            counts = await db(_wake_stranded)(in_hand=list(self.in_hand), answers=answers)
        except Exception:
            log.exception("sweeping tasks left mid-step failed; trying again next tick")
            return
        for task_id in answers:
            if task_id not in self.in_hand:
                self.unrecorded.pop(task_id, None)
        if any(counts.values()):
            log.warning("settled tasks left mid-step: %s", counts)

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
        """queued → preparing → submitting → POST → the row docs/ember.md's table names.

        Returns True when the task went on to `running`.
        """
        if await db(self._stop_resending)(task):
            return False
        await db(move)(
            task, TaskState.PREPARING, expected=task.version, phase="Checking reference photos"
        )
        references = await self.load_references(task)
        if references is None:
            # Versioned: a cancel that won while the references were read stands.
            await db(move)(
                task,
                TaskState.FAILED,
                expected=task.version,
                phase="Failed",
                error=REFERENCE_CHANGED,
            )
            return False
        if self.stopping:
            # Nothing has been sent: a stopping worker does not start a paid request.
            await db(move)(
                task, TaskState.QUEUED, expected=task.version, phase="Waiting for the worker"
            )
            return False
        number = await db(_attempt_number)(task)
        payload = build_payload(task, references, attempt=number)
        await db(move)(
            task,
            TaskState.SUBMITTING,
            expected=task.version,
            submitted_at=timezone.now(),
            phase="Sending to Ember",
        )
        return await self._send(task, payload, number)

    def _stop_resending(self, task: Task) -> bool:
        """Rest a clip `uncertain` once its key was first sent longer than the poll bound ago.

        Re-sending under the key is free, but one whose answers keep getting lost
        would otherwise be sent every few seconds for ever. Returns True when it rests.
        """
        sent = task.attempt_under_key()
        if sent is None:
            return False
        if (timezone.now() - sent.submitted_at).total_seconds() <= self.poll_bound:
            return False
        since = sent.submitted_at.astimezone(UTC)
        move(
            task,
            TaskState.UNCERTAIN,
            expected=task.version,
            phase=RECONCILE_PHASE,
            error=f"Ember's answer to this clip never arrived: it was re-sent under key "
            f"{task.idempotency_key} since {since:%Y-%m-%d %H:%M:%S} UTC; nothing more was sent.",
        )
        return True

    async def _send(self, task: Task, payload: dict[str, Any], number: int) -> bool:
        """POST the job and record what the answer proves; True when it went on to `running`.

        Nothing that goes wrong here leaves the task `submitting`, where nothing would
        move it while this worker lives: an answer that cannot be read, or one whose
        recording fails, puts the task where the wake-up table would, at once.
        """
        task_id = str(task.pk)
        answer: Answer = None
        try:
            submitted = await self.client.submit(payload, idempotency_key=task.idempotency_key)
        except EmberError as exc:
            answer, detail = exc, exc.message
        except Exception as exc:
            log.exception("task=%s Ember's answer to a submit could not be read", task_id)
            detail = f"Ember's answer could not be read ({type(exc).__name__})."
        else:
            answer = submitted
            detail = f"Ember accepted job {submitted.job_id}, but recording it failed."
        try:
            # Shielded: Ember's answer is recorded even if we are being cancelled.
            if isinstance(answer, Submitted):
                await asyncio.shield(db(_record_accepted)(task, answer, number))
                return True
            if isinstance(answer, EmberError):
                await asyncio.shield(db(_record_refusal)(task, answer, number))
                return False
        except Exception:
            if isinstance(answer, Submitted):
                # A person may need this job id to find the paid job: say it loudly.
                log.error(
                    "task=%s Ember accepted job %s, but recording it failed",
                    task_id,
                    answer.job_id,
                    exc_info=True,
                )
            else:
                log.exception("task=%s recording Ember's answer failed", task_id)
        # If this write fails too, the pump's sweep settles the task from `unrecorded`.
        self.unrecorded[task_id] = answer
        await asyncio.shield(db(_settle_unrecorded)(task_id, answer, detail))
        del self.unrecorded[task_id]
        return False

    async def load_references(self, task: Task) -> list[dict[str, Any]] | None:
        """Read and re-hash each frozen reference; None when one is missing or changed."""
        return await asyncio.to_thread(_read_references, task.references)

    async def follow(self, task: Task) -> bool:
        """Poll a running job until it ends; returns True when it went on to `copying`.

        Errors while polling are transient (docs/ember.md): polling goes on within the
        bound, and the latest problem is shown on the task so people see why it waits.
        The bound is applied only after an answer that does not end the job: a worker
        back from a long outage asks Ember first, since the job may well have finished.
        """
        assert task.submitted_at is not None
        deadline = task.submitted_at + timedelta(seconds=self.poll_bound)
        while not self.stopping:
            try:
                job = await self.client.poll(task.ember_job_id)
            except EmberUnsafeId as exc:
                # The job id, or the image its result names, cannot go into a URL.
                await db(_rest_unsafe)(task, exc)
                return False
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
                if job.status in ("succeeded", "failed"):
                    return await db(_record_ended)(task, job)
            if timezone.now() > deadline:
                await db(self._give_up)(task)
                return False
            await self._sleep(self.poll_interval)
        return False

    def _give_up(self, task: Task) -> None:
        """Past the bound with the job unfinished: rest `uncertain`, resubmitting nothing."""
        last = f" Ember's last answer: {task.error}" if task.error else ""
        move(
            task,
            TaskState.UNCERTAIN,
            phase="Ember did not finish in time; reconcile before retry",
            error=f"Ember's job {task.ember_job_id} did not finish within "
            f"{self.poll_bound:.0f} seconds. Nothing was resubmitted.{last}",
        )

    async def finish(self, task: Task) -> None:
        """Copy first, release last (docs/design.md §6.7): the original, its row, then the PATCH."""
        result = task.result or {}
        image = result.get("image") or {}
        history = result.get("history") or {}
        # The asset row and `task.asset` are written in one transaction (record_asset),
        # so the task, read fresh by this coroutine, says whether the bytes are safe.
        asset = None if task.asset_id is None else await db(Asset.objects.get)(pk=task.asset_id)
        if asset is None:
            original = await self._copy_or_rest(task, image)
            if original is None:
                return
            asset = await db(record_asset)(task, original)
        elif (
            history.get("id")
            and not asset.ember_history_id
            and image.get("id") == asset.ember_image_id
        ):
            # The bytes are already safe: only the history id is new. An answer about
            # another image (another attempt's) never lends this one its history.
            await db(update)(asset, ember_history_id=history["id"])
        released = task.protection_released
        if released is not True and asset.ember_image_id:
            # Always the image whose bytes Avatars holds, never one it did not copy.
            released = await self.client.release(asset.ember_image_id)
        await db(_rest)(task, asset, result, released)

    async def _copy_or_rest(self, task: Task, image: dict[str, Any]) -> originals.Original | None:
        """Copy the image, or rest the task where the failure says and return None."""
        try:
            return await self._copy(image)
        except EmberUnsafeId as exc:
            # Nothing was fetched; an original nobody can name safely is not "failed".
            await db(_rest_unsafe)(task, exc)
        except (EmberError, originals.NotAnImage, originals.ChecksumFailed, OSError) as exc:
            await db(move)(
                task,
                TaskState.COPY_FAILED,
                phase="The copy from Ember failed; reconcile to retry",
                error=getattr(exc, "message", None) or str(exc),
            )
        return None

    async def _copy(self, image: dict[str, Any]) -> originals.Original:
        """Fetch the image and save it as an original, retrying a few times."""
        delay = self.fetch_retry_delay
        for attempt in range(1, FETCH_TRIES + 1):
            try:
                data, _content_type = await self.client.fetch(
                    image["id"], sha256=image.get("sha256")
                )
                return await asyncio.to_thread(originals.save, data)
            except (EmberNotFound, EmberTooLarge, EmberUnsafeId, originals.NotDurable):
                # The image is gone, too large, or cannot be named safely, or the disk
                # did not confirm the write: asking again gets the same answer, and a
                # second fsync proves nothing (the kernel may have dropped the pages it
                # failed to write).
                raise
            except (EmberError, originals.NotAnImage, originals.ChecksumFailed, OSError):
                if attempt == FETCH_TRIES:
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")


# --- steps that touch only the database or files, run in threads ---------------


def _record_ended(task: Task, job: Job) -> bool:
    """Record a job Ember ended: `copying` with its answer saved, or `failed`; True for copying."""
    if job.status == "succeeded":
        move(
            task,
            TaskState.COPYING,
            result=job.result,
            phase="Copying the original from Ember",
            error="",
        )
        return True
    move(task, TaskState.FAILED, phase="Ember could not generate this", error=job.error)
    return False


def _rest_unsafe(task: Task, exc: EmberUnsafeId) -> Task:
    """Rest a task `uncertain` whose job or image Ember named with an unsafe id.

    Not `failed`: Ember may hold a paid, protected original of it, which a person
    can look up in Ember; nothing here may ask about it.
    """
    return move(
        task,
        TaskState.UNCERTAIN,
        phase=UNSAFE_ID_PHASE,
        error=f"{exc.message} {NOTHING_MORE_SENT}",
    )


def build_payload(task: Task, references: list[dict[str, Any]], *, attempt: int) -> dict[str, Any]:
    """Return the asynchronous door's request body for `task` (docs/ember.md)."""
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
        # A clip sent before under its key is that attempt, now with its job (Ember
        # answers every send under one key with the same job). An image's accepted
        # submit is always a new job.
        sent = task.attempt_under_key()
        if sent is None and task.kind == Kind.CLIP:
            # Recorded before attempts carried the key: the same job is the same attempt.
            sent = task.attempts.filter(ember_job_id=submitted.job_id).first()
        if sent is None:
            Attempt.objects.create(
                task=task,
                number=number,
                idempotency_key=task.idempotency_key,
                ember_job_id=submitted.job_id,
                submitted_at=task.submitted_at or now,
                answered_at=now,
                outcome=Attempt.Outcome.ACCEPTED,
            )
        else:
            update(
                sent,
                idempotency_key=task.idempotency_key,
                ember_job_id=submitted.job_id,
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
    """Record what a failed submit proves, row by row of docs/ember.md's Submit outcomes."""
    now = timezone.now()
    requeue = _not_accepted(exc)
    if requeue is not None:
        wait, phase = requeue
        return move(
            task,
            TaskState.QUEUED,
            due=now + timedelta(seconds=wait),
            phase=phase,
            error=exc.message,
        )
    if isinstance(exc, EmberRejected | EmberNotFound):
        return move(task, TaskState.FAILED, phase="Ember refused this request", error=exc.message)
    # The request may have reached Ember: it is an attempt, and may have been paid for.
    with transaction.atomic():
        _record_unknown_attempt(task, exc.message, number=number)
        # A clip accepted under an unsafe id would get the same id back if re-sent.
        if task.kind == Kind.CLIP and not isinstance(exc, EmberUnsafeId):
            return move(
                task,
                TaskState.QUEUED,
                due=now + timedelta(seconds=RESEND_BACKOFF),
                phase="Ember's answer was lost; re-sending under the same key",
                error=exc.message,
            )
        return move(
            task,
            TaskState.UNCERTAIN,
            phase=RECONCILE_PHASE,
            error=f"{MAY_HAVE_REACHED} ({exc.message})",
        )


def _not_accepted(exc: EmberError) -> tuple[float, str] | None:
    """Return (seconds to wait, phase) for an answer proving nothing was accepted, else None."""
    if isinstance(exc, EmberUnavailable):
        return UNREACHABLE_BACKOFF, "Ember could not be reached; will try again"
    if isinstance(exc, EmberBusy):
        return exc.retry_after, f"Ember is busy; trying again in {exc.retry_after:.0f} s"
    if isinstance(exc, EmberAuthError):
        return AUTH_BACKOFF, "Ember refused our credentials; check EMBER_TOKEN"
    return None


def _record_unknown_attempt(task: Task, error: str, *, number: int | None = None) -> None:
    """A submit that may have been paid for is an attempt, with no job id yet.

    A clip already sent under its key is already that attempt: nothing new is recorded.
    """
    if task.attempt_under_key() is not None:
        return
    Attempt.objects.create(
        task=task,
        number=number or task.attempts.count() + 1,
        idempotency_key=task.idempotency_key,
        submitted_at=task.submitted_at or timezone.now(),
        outcome=Attempt.Outcome.UNKNOWN,
        error=error,
    )


def _attempt_number(task: Task) -> int:
    """Return the number the next send is: a clip re-sent under its key keeps its number."""
    sent = task.attempt_under_key()
    return sent.number if sent is not None else task.attempts.count() + 1


def record_asset(task: Task, original: originals.Original) -> Asset:
    """Write the generated original's row (with its history id when Ember sent one)."""
    result = task.result or {}
    image = result.get("image") or {}
    history = result.get("history") or {}
    metadata = image.get("metadata") or {}
    with transaction.atomic():
        asset = Asset.objects.create_stored(
            original,
            file_name=f"{task.provider}-{task.frame}-{task.ordinal}{original.info.extension}",
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


def _rest(task: Task, asset: Asset, result: dict[str, Any], released: bool | None) -> Task:
    """Write `done` when the asset has its history id, else `history_missing` saying why."""
    if asset.ember_history_id:
        return move(task, TaskState.DONE, phase="Complete", error="", protection_released=released)
    image_id = (result.get("image") or {}).get("id")
    if image_id != asset.ember_image_id:
        error = (
            f"The saved answer is about image {image_id}, not this task's image "
            f"{asset.ember_image_id}; its history was not used."
        )
    else:
        error = result.get("history_error") or "Ember did not write its history row."
    return move(
        task,
        TaskState.HISTORY_MISSING,
        phase="Original saved; history needs repair",
        error=error,
        protection_released=released,
    )


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
    caught in `submitting` is left to the pump's sweep (the wake-up table), which
    knows what an interrupted submit may mean. The write is versioned: a cancel
    that lands between this read and this write stands.
    """
    task = Task.objects.get(pk=task_id)
    state = TaskState.QUEUED if task.state == TaskState.PREPARING else task.state
    if state in ACTIVE:
        due = timezone.now() + timedelta(seconds=CRASH_BACKOFF)
        with contextlib.suppress(Conflict):
            move(task, TaskState(state), expected=task.version, due=due, error=error[:2000])


# --- the wake-up table -------------------------------------------------------------

STRANDED = (TaskState.PREPARING, TaskState.SUBMITTING)  # states that only a coroutine holds
NOT_SENT_PHASE = "Ember did not take it; will try again"


def _wake_stranded(*, in_hand: list[str], answers: dict[str, Answer]) -> dict[str, int]:
    """Settle each task mid-step that no coroutine holds; return counts by state.

    `answers` holds what Ember answered to submits whose recording failed: an answer
    that proves nothing was accepted must not read as "may have reached Ember".
    """
    counts = {"preparing": 0, "submitting": 0}
    for task in Task.objects.filter(state__in=STRANDED).exclude(pk__in=in_hand):
        state = task.state
        try:
            if state == TaskState.SUBMITTING and str(task.pk) in answers:
                _settle(task, answers[str(task.pk)])
            else:
                _wake(task)
        except Conflict:
            continue  # a cancel (or another writer) moved it first: its write stands
        counts[state] += 1
    return counts


def _settle_unrecorded(task_id: str, answer: Answer, detail: str) -> None:
    """Settle a `submitting` task whose answer could not be read or recorded."""
    task = Task.objects.get(pk=task_id)
    if task.state != TaskState.SUBMITTING:
        return  # the answer was recorded after all, or another writer moved it
    with contextlib.suppress(Conflict):
        _settle(task, answer, detail=detail)


def _settle(task: Task, answer: Answer, *, detail: str = "") -> None:
    """Put a `submitting` task where Ember's answer (if it proves anything) or the table says."""
    if isinstance(answer, EmberError) and not answer.may_have_arrived:
        # Nothing was accepted: back to `queued` after a pause, never "may have reached".
        move(
            task,
            TaskState.QUEUED,
            expected=task.version,
            due=timezone.now() + timedelta(seconds=CRASH_BACKOFF),
            phase=NOT_SENT_PHASE,
            error=answer.message,
        )
    else:
        # A clip accepted under an unsafe id would get the same id back if re-sent.
        _wake(task, detail=detail, resend=not isinstance(answer, EmberUnsafeId))


def _wake(task: Task, *, detail: str = "", resend: bool = True) -> None:
    """Move a task left mid-step to where the wake-up table says, with versioned writes.

    `detail`, when known, says on the attempt why its outcome is unknown; without
    `resend` a clip rests `uncertain` like an image instead of going out again.
    """
    expected = task.version
    if task.state == TaskState.PREPARING:
        # Nothing left the building; a clip's key makes a restart free.
        move(task, TaskState.QUEUED, expected=expected, phase="Waiting for the worker")
        return
    with transaction.atomic():
        # Either kind may have been paid for: the send is an attempt (for a clip, the one
        # its key stands for, which also makes it too late to cancel).
        _record_unknown_attempt(task, detail or MAY_HAVE_REACHED)
        if task.kind == Kind.CLIP and resend:
            move(task, TaskState.QUEUED, expected=expected, phase="Re-sending under the same key")
        else:
            move(
                task,
                TaskState.UNCERTAIN,
                expected=expected,
                phase=RECONCILE_PHASE,
                error=MAY_HAVE_REACHED,
            )
