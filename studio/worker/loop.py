"""The worker's loop (docs/design.md §6.1, §6.4, §6.8): one owner, the pump, stopping.

`Worker` owns the database's lock, wakes up by the wake-up table, then pumps: once
a tick, and whenever a slot frees, it starts one coroutine per due task (the steps,
mixed in from steps.py). Database calls run through `db` (one thread, one
connection); Ember calls are async; file work runs in threads. A failing database
is waited out with back-off; a lost lock stops the worker at once.
"""

import asyncio
import contextlib
import logging
import sys
import time
from collections import deque
from datetime import datetime

from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)
from django.db.models import QuerySet
from django.utils import timezone

from studio import leftovers, restoring
from studio.ember.client import EmberClient
from studio.engine.adoption import adopt_due
from studio.models import ACTIVE, POLL_BOUND, Task, TaskState
from studio.ownership import LOCK_LOST, NotOwner, Ownership, OwnershipLost
from studio.worker import credentials, resume, room, turns
from studio.worker.heartbeat import beat as _beat
from studio.worker.heartbeat import record_stop, touch
from studio.worker.pacing import Pacing
from studio.worker.steps import FETCH_RETRY_DELAY, Steps
from studio.worker.transitions import Answer, _wake_stranded, db

log = logging.getLogger("studio.worker")

TICK = 1.0  # seconds between pump passes
STOP_GRACE = 30.0  # seconds in-flight steps get to record Ember's answer on shutdown
HEARTBEAT_INTERVAL = 5.0  # seconds between the worker's "still alive" writes
DB_RETRY_DELAY = 1.0  # seconds before the pump retries a failed database; doubled each time
DB_RETRY_MAX = 8.0  # seconds; the back-off's ceiling (a page says "No worker seen" after 15 s
# of no heartbeat: a review's said so for 30 s after the database was back)
ADOPT_CHECK = 5.0  # seconds between looks for lost submits due a history search
# The database thread lets go of the interpreter at every SQLite call and then waits for
# the event loop to hand it back: at Python's default of 5 ms a state write waited longer
# for the interpreter than it ran (`make bench` engine row: ~0.73x, ~0.77x at 0.5 ms).
SWITCH_INTERVAL = 0.0005  # seconds
# What a locked, restarting or unreachable database raises; it passes, so the pump waits.
DB_ERRORS = (OperationalError, InterfaceError)
# `--once` stops after this many database errors in a row (about 40 s of waits, past a
# lock's usual wait): a run from cron on a read-only database never ended (a review).
ONCE_DB_TRIES = 8


class OnceGaveUp(Exception):
    """`--once` stopped short of a resting point: the database kept refusing it."""


class Worker(Steps):
    """Drive ACTIVE tasks to a resting point; see `run`."""

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
        adopt_check: float = ADOPT_CHECK,
    ) -> None:
        """Set the worker up; it drives nothing until `lock()` and `run()`.

        Without `client` it opens (and at the end closes) its own Ember client.
        """
        self._own_client = client is None
        self.workers = workers or settings.AVATARS_WORKERS
        self.client = client or EmberClient(slots=self.workers)
        self.poll_interval = (
            settings.AVATARS_POLL_INTERVAL if poll_interval is None else poll_interval
        )
        self.pacing = Pacing(self.poll_interval)  # when to poll a job first (§6.6)
        self.room = room.Room()  # whether a send's image could be kept (room.py)
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
        # Due tasks the last pump query found beyond the room it had, and when (monotonic).
        self._ahead: list[Task] = []
        self._ahead_at = float("-inf")
        # Ember's answers whose recording failed, by task id, until the task is settled.
        self.unrecorded: dict[str, Answer] = {}
        self.interrupted: dict[str, float] = {}  # stopped mid-step by the database: when to go on
        self._last_beat = float("-inf")  # loop time of the last heartbeat written
        self._last_verified = float("-inf")  # loop time the lock was last checked
        self.db_retry_delay = db_retry_delay
        self.adopt_check = adopt_check
        self._adopting: asyncio.Task[int] | None = None  # the history search in flight
        self._adopt_started = float("-inf")  # time.monotonic() of the last search's start
        self._ownership = Ownership()
        # The turns of coroutines that ended, oldest first: the slots' refills take them.
        self._handoff: deque[turns.Turn] = deque(maxlen=self.workers)

    # --- ownership (§6.1) -------------------------------------------------------------

    def lock(self) -> None:
        """Become the database's one worker, or raise AlreadyRunning (or NotDurable)."""
        self._ownership.acquire()

    def unlock(self) -> None:
        """Give up ownership of the database (the locks `lock` took)."""
        self._ownership.release()

    # --- waking up after a death (§6.2) -----------------------------------------------

    def recover(self) -> dict[str, int]:
        """Apply the wake-up table to tasks a dead worker left mid-step; return counts."""
        counts = {"temp_files": leftovers.remove_stale_temp_files()}
        counts.update(_wake_stranded(in_hand=[], answers={}, unsettled=set()))
        # `running` resumes polling its job id; `copying` runs finish() again: before any
        # task not yet sent, so what Ember finished is collected first.
        # A token read anew: what waited on Ember refusing the last one is due now.
        counts["credentials_again"] = credentials.wake(timezone.now())
        counts["paid_first"] = resume.paid_first(timezone.now())
        return counts

    # --- the pump (§6.4) --------------------------------------------------------------

    async def run(self, *, once: bool = False) -> None:
        """Recover, then pump until stopped (or, with `once`, until nothing is due or in hand).

        Only the database's owner runs: call `lock()` first (NotOwner otherwise). A failing
        database is waited out with back-off (`--once` gives up: OnceGaveUp); losing the
        lock stops the worker at once (OwnershipLost)."""
        if not self._ownership.held:
            raise NotOwner()
        restoring.unfinished()  # a half-restored install may hold tasks not yet held back
        self._stop_event = asyncio.Event()
        self._slot_freed = asyncio.Event()
        gate = turns.GATE.set(turns.Gate())
        counts = await db(self.recover)()
        log.info("worker started workers=%s recovered=%s", self.workers, counts)
        started_at = timezone.now()
        delay, failures = self.db_retry_delay, 0
        # A stop asked for, --once done or the lock lost: the heartbeat says "stopped" (a
        # crash leaves it to go stale). Only this process's row is marked: a new owner's stays.
        say_stopped = False
        try:
            while not self.stopping:
                try:
                    started = await self._pass(started_at)
                except DB_ERRORS as exc:
                    failures += 1
                    if once and failures >= ONCE_DB_TRIES:
                        raise OnceGaveUp(_gave_up(failures, exc)) from None
                    log.warning("database error: %s; retrying in %g s", exc, delay)
                    await db(_drop_connection)()
                    await self._sleep(delay)
                    delay = min(delay * 2, DB_RETRY_MAX)
                    continue
                except OwnershipLost:
                    log.error("%s", LOCK_LOST)
                    self._stop_now()
                    say_stopped = True
                    raise
                delay, failures = self.db_retry_delay, 0  # the database answers again
                if once and not self.in_hand and started == 0 and not await self._adopted():
                    break
                await self._idle()
            say_stopped = True
        finally:
            await self._drain()
            if say_stopped:
                await self._record_stop()
            if self._own_client:
                await self.client.aclose()
            turns.GATE.reset(gate)
            log.info("worker stopped")

    async def _record_stop(self) -> None:
        """Mark the heartbeat stopped, so people see at once that no worker runs."""
        try:
            await db(record_stop)()
        except DatabaseError as exc:
            # Nothing is lost: the last beat goes stale after STALE_AFTER, as a killed one does.
            log.warning("could not mark the heartbeat stopped: %s", exc)

    async def _pass(self, started_at: datetime) -> int:
        """Run one pump pass: the heartbeat and the lock check when due, then `pump`."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_beat >= HEARTBEAT_INTERVAL:
            # One small write every few seconds, not one per task.
            touch()  # first: said even when the database refuses the row
            await db(_beat)(started_at)
            self._last_beat = loop.time()
        if self._ownership.can_be_lost and loop.time() - self._last_verified >= self.tick:
            # A worker whose lock went must not start another step (at most once a tick:
            # the pump also passes whenever a slot frees).
            await db(self._ownership.verify)()
            self._last_verified = loop.time()
        started = await self.pump()
        self._search_history()
        return started

    async def pump(self) -> int:
        """Reap, settle stranded tasks, start due ones up to the limit; return how many started."""
        if self._slot_freed is not None:
            self._slot_freed.clear()  # this pass reaps every coroutine that ended until now
        self._reap()
        await self.sweep()
        room = self.workers - len(self.in_hand)
        if room <= 0 or self.stopping:
            return 0
        chosen = await self._next_due(room)
        for task_id, row in chosen:
            # A refill goes on with the turn of the task whose slot it takes (turns.py).
            turn = self._handoff.popleft() if self._handoff else turns.new_turn()
            job = asyncio.create_task(self.drive(task_id, row=row, turn=turn), name=task_id)
            job.add_done_callback(self._freed)
            self.in_hand[task_id] = job
        return len(chosen)

    async def _next_due(self, room: int) -> list[tuple[str, Task | None]]:
        """Return up to `room` due tasks not in hand, from the last query's surplus first.

        A freed slot is refilled from the surplus at once: a query would wait on the
        database thread behind every write in flight (a good part of a second with 64
        slots). The surplus is at most one tick old, so it is as fresh as the pump's
        own pace. A queued task starts from the row the query read (its first write,
        `preparing`, is versioned: a cancel that landed meanwhile stands, and the
        coroutine leaves it); any other is read afresh by its coroutine.
        """
        chosen = self._resumed(room)
        taken = {i for i, _row in chosen}
        fresh = time.monotonic() - self._ahead_at < self.tick
        waiting = {**self.in_hand, **self.interrupted}
        ahead = [r for r in self._ahead if str(r.pk) not in waiting] if fresh else []
        ahead = [r for r in ahead if str(r.pk) not in taken]
        more = room - len(chosen)
        chosen += [(str(r.pk), r if r.state == TaskState.QUEUED else None) for r in ahead[:more]]
        self._ahead = ahead[more:]
        if len(chosen) < room:
            wanted = room - len(chosen)
            taken = {i for i, _row in chosen}
            found = [
                r for r in await db(self._due)(wanted + self.workers) if str(r.pk) not in taken
            ]
            chosen += [(str(r.pk), r) for r in found[:wanted]]
            self._ahead, self._ahead_at = found[wanted:], time.monotonic()
        return chosen

    def _resumed(self, room: int) -> list[tuple[str, Task | None]]:
        """Return up to `room` tasks a database out of reach stopped mid-step, due again.

        They go first, read afresh by their coroutines: one at Ember had otherwise waited
        behind every task queued before it reached Ember (a review's finished images sat
        uncopied for a minute behind a batch's queue).
        """
        now = time.monotonic()
        ready = [t for t, at in self.interrupted.items() if at <= now and t not in self.in_hand]
        for task_id in ready[:room]:
            del self.interrupted[task_id]
        return [(task_id, None) for task_id in ready[:room]]

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
        unsettled: set[str] = set()
        try:
            counts = await db(_wake_stranded)(
                in_hand=list(self.in_hand), answers=answers, unsettled=unsettled
            )
        except Exception:
            log.exception("sweeping tasks left mid-step failed; trying again next tick")
            return
        # Ember's answer is kept until its task is settled: dropped with its write failed, a
        # later sweep woke the task as "may have reached Ember", its paid job known only to
        # the log (a review's full database disk).
        for task_id in answers:
            if task_id not in self.in_hand and task_id not in unsettled:
                self.unrecorded.pop(task_id, None)
        if any(counts.values()):
            log.warning("settled tasks left mid-step: %s", counts)

    # --- adoption without a person (§8.1) ---------------------------------------------

    def _search_history(self) -> None:
        """Start a search of Ember's history for lost submits, in the background (bounded).

        Beside the pump, never in its way: at most one search runs at a time, and each
        looks at most `adopt_check` seconds after the last one began. What is due, and
        how many a minute, is decided from the database (engine.adopt_due).
        """
        now = time.monotonic()
        if self.stopping or (self._adopting is not None and not self._adopting.done()):
            return
        if now - self._adopt_started < self.adopt_check:
            return
        self._adopt_started = now
        self._adopting = asyncio.create_task(self._adopt(), name="history search")

    async def _adopt(self) -> int:
        """Run one adoption pass; return how many tasks it handed back to the pump."""
        try:
            searched = await adopt_due(client=self.client)
        except Exception:
            log.exception("searching Ember's history failed; trying again later")
            return 0
        return sum(task.state in ACTIVE for task in searched)

    async def _adopted(self) -> bool:
        """Wait for the search in flight; say whether it gave the pump work (for `once`)."""
        job, self._adopting = self._adopting, None
        return job is not None and await job > 0

    def _due(self, limit: int) -> list[Task]:
        """Return up to `limit` due tasks not in hand, read whole, on a fresh connection.

        Each coroutine starts from the row read here: one query a pass, not one a task.
        """
        checked = time.monotonic()
        # A long-lived worker drops connections that broke or aged out, at most once a
        # tick: the pump also passes whenever a slot frees, and reconnecting for every
        # task would cost more than the query. (A test's transaction is not stale.)
        if _recyclable() and checked - self._recycled_at >= self.tick:
            close_old_connections()
            self._recycled_at = checked
        return list(self._due_query(timezone.now())[:limit])

    def _due_query(self, now: datetime) -> "QuerySet[Task]":
        """Return the pump's query: due ACTIVE tasks not in hand, nor waiting to go on after
        the database stopped them mid-step (served by `task_due_idx`).

        Such a task goes on from `_resumed` once its wait is over: read again here, it was
        driven again at once, over and over, while the database refused writes (a review
        counted 2,000 lines a second).
        """
        return Task.objects.due(now).exclude(pk__in=[*self.in_hand, *self.interrupted])

    def _reap(self) -> None:
        """Forget coroutines that ended, logging the ones that raised."""
        for task_id, job in list(self.in_hand.items()):
            if job.done():
                del self.in_hand[task_id]
                if not job.cancelled() and job.exception() is not None:
                    log.error("task=%s coroutine failed", task_id, exc_info=job.exception())

    # --- stopping (§6.8) --------------------------------------------------------------

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
        if self._adopting is not None:
            # Stopping a search loses nothing: history is free to read again at its next turn.
            self._adopting.cancel()
            await asyncio.gather(self._adopting, return_exceptions=True)
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


def tune_interpreter() -> None:
    """Set the worker process's thread switch interval (SWITCH_INTERVAL); call it once, at start."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def _drop_connection() -> None:
    """Close this thread's connection after a database error; the next query opens a new one.

    Django keeps a broken connection and fails every later query on it. (Inside a
    test's transaction the connection is not broken, and closing would end it.)
    """
    if _recyclable():
        with contextlib.suppress(DatabaseError):  # a broken one may complain while closing
            connection.close()


def _recyclable() -> bool:
    """Say whether this thread's connection may be closed, for the next query to open anew.

    Not a SQLite one: a file, not a session a server can drop, it neither breaks nor
    ages, and opening one maps its shared-memory file, which on a full disk killed the
    worker with SIGBUS (a review; the pump reopened it every tick). Nor one inside a
    test's transaction, which closing would end.
    """
    return connection.vendor != "sqlite" and not connection.in_atomic_block


def _nothing() -> None:
    """Return at once: awaited on the database thread, it waits for the call ahead of it."""


def _gave_up(failures: int, exc: Exception) -> str:
    said = " ".join(str(exc).split()).rstrip(".")
    return (
        f"The database refused the worker {failures} times in a row ({said}): --once stopped "
        "before the tasks reached a resting point. Nothing is lost; the next run goes on."
    )
