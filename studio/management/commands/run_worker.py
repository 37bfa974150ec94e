"""`manage.py run_worker`: drive Avatars' tasks through Ember (docs/design.md §6)."""

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from avatars import early
from studio import heap, metrics, restoring
from studio.management.ready import require_migrated
from studio.ownership import AlreadyRunning, NotDurable, OwnershipLost, stand_by
from studio.restoring import RestoreUnfinished
from studio.worker import Worker
from studio.worker.loop import OnceGaveUp, tune_interpreter

STOPPED_STANDING_BY = "Stopped while standing by: this worker never owned the database."
STOPPED_STARTING = "Stopped while starting: nothing was sent to Ember."


class Command(BaseCommand):
    help = "Run the worker that turns queued tasks into Ember jobs and copies their results."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=None, help="tasks driven at once")
        parser.add_argument(
            "--once", action="store_true", help="drive what is due to a resting point, then exit"
        )
        parser.add_argument(
            "--standby",
            action="store_true",
            help="wait while another worker owns the database, and take over when it stops",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with _sigterm_noted() as asked:
            self._start(asked, **options)

    def _start(self, asked: list[int], **options: Any) -> None:
        """Start as `handle` says; a SIGTERM noted in `asked` stops it as soon as it can."""
        require_migrated()
        heap.give_back_large_blocks()  # its copies decode Ember's images (studio/heap.py)
        workers = options["workers"]
        if workers is not None and workers < 1:
            raise CommandError("--workers must be at least 1")
        worker = Worker(workers=workers)
        try:
            if asked or not self._lock(worker, standby=options["standby"]):
                self.stdout.write(STOPPED_STANDING_BY if options["standby"] else STOPPED_STARTING)
                return
        except (AlreadyRunning, NotDurable) as exc:
            raise CommandError(str(exc)) from None
        try:
            restoring.unfinished()  # refused before saying it runs (the loop checks again)
            # Every process forgets ended ones' figure files as it starts; a standby may
            # have waited hours since, and the owner it replaces has just ended.
            metrics.forget_dead_processes()
            # The start-up checks' connection: from here on the worker's database work runs
            # on a thread of its own, and this one sat idle for the process's life (after a
            # server restart, a dead socket; a review's).
            connection.close()
            tune_interpreter()
            asyncio.run(self._run(worker, once=options["once"], asked=asked))
        except (OwnershipLost, RestoreUnfinished, OnceGaveUp) as exc:
            # A non-zero exit: the lock is gone, or a restore must be finished first.
            raise CommandError(str(exc)) from None
        finally:
            worker.unlock()

    def _lock(self, worker: Worker, *, standby: bool) -> bool:
        """Take the database's locks; False when a standby was stopped before it could."""
        if not standby:
            worker.lock()  # AlreadyRunning at once when another worker owns the database
            return True
        # SIGTERM stops a standby as Ctrl-C does: it holds nothing, so it just exits.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            stand_by(worker.lock)
        except KeyboardInterrupt:
            worker.unlock()  # the signal may have come just as the locks were taken
            return False
        finally:
            signal.signal(signal.SIGTERM, previous)
        return True

    async def _run(self, worker: Worker, *, once: bool, asked: list[int]) -> None:
        loop = asyncio.get_running_loop()
        # A signal only asks the loop to stop; a second one forces it.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.request_stop)
        if asked:  # a SIGTERM while it started (the locks taken): it stops at once
            worker.request_stop()
        self.stdout.write(f"Avatars worker running ({worker.workers} at once)")
        self.stdout.flush()
        await worker.run(once=once)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_noted() -> Iterator[list[int]]:
    """While the worker starts, a SIGTERM is noted (in the list yielded), not the end of the
    process: it stops as soon as it can, with a sentence and exit 0, as a service manager's
    stop should. It ended the process with -15 in its first second (a review's kills).
    One during Django's start-up, before this ran, was noted by manage.py (avatars/early.py)."""
    asked: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: asked.append(signum))
    asked += early.NOTED  # during Django's start-up: read after, so that none falls between
    try:
        yield asked
    finally:
        signal.signal(signal.SIGTERM, previous)
