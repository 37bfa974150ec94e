"""One owner per database (docs/design.md §6): the worker's locks, and the durability it insists on.

On every database the worker holds an flock on `worker.lock` in the data dir. On
SQLite it also holds one on a lock file beside the database file, so two data dirs
pointing at one database file cannot give two workers. An flock only guards one
machine, so on PostgreSQL it also holds a session-level advisory lock on a
connection of its own for its whole life: a second worker anywhere is refused, and
the lock goes when the owner's connection dies. The worker checks that connection
every tick (`verify`) and stops when it lost the lock. A standby (`stand_by`) waits
for those locks instead of refusing, and takes them as soon as the owner is gone.
"""

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from filelock import FileLock
from filelock import Timeout as LockHeld

log = logging.getLogger("studio.worker")

LOCK_REFUSED = "Another Avatars worker already owns this database"
LOCK_LOST = (
    "The worker lost its lock on the database: its PostgreSQL session holding the lock "
    "ended, so another worker may own the database now. Stopping."
)
STANDING_BY = "standing by: another worker owns this database; taking over when it stops"
# Seconds between a standby's looks at the locks: well inside the two seconds it promises.
STANDBY_POLL = 0.25
NOT_OWNER = "The worker must hold the database's locks before it runs: call lock() first."
# The advisory lock's key: any fixed 64-bit number no other app on the database uses.
ADVISORY_KEY = 0x4176_6174_6172_73  # "Avatars"
NOT_DURABLE = (
    "PostgreSQL's synchronous_commit is off for this database, so a committed task state "
    "could be lost in a crash while the paid request it announced goes ahead. "
    "Turn synchronous_commit on before starting the worker."
)


class AlreadyRunning(RuntimeError):
    def __init__(self) -> None:
        super().__init__(LOCK_REFUSED)


class NotDurable(RuntimeError):
    def __init__(self) -> None:
        super().__init__(NOT_DURABLE)


class OwnershipLost(RuntimeError):
    def __init__(self) -> None:
        super().__init__(LOCK_LOST)


class NotOwner(RuntimeError):
    def __init__(self) -> None:
        super().__init__(NOT_OWNER)


class Ownership:
    """The locks that make this process the database's one worker."""

    def __init__(self) -> None:
        self._file_locks: list[FileLock] = []
        self._pg: Any = None  # the dedicated connection holding the advisory lock
        self._pg_started: datetime | None = None  # the server's start time when we took it
        self.held = False

    def acquire(self) -> None:
        """Take every lock, or raise AlreadyRunning / NotDurable holding none of them."""
        try:
            self._take_file_lock(Path(settings.AVATARS_DATA_DIR) / "worker.lock")
            beside = sqlite_lock_path()
            if beside is not None:
                self._take_file_lock(beside)
            if connection.vendor == "postgresql":
                check_durable()
                self._take_advisory_lock()
        except BaseException:
            self.release()
            raise
        self.held = True

    def release(self) -> None:
        self.held = False
        self._drop_pg()  # ends the session, and with it the advisory lock
        while self._file_locks:
            self._file_locks.pop().release()

    @property
    def can_be_lost(self) -> bool:
        """Whether `verify` has anything to check: an flock stays while the process lives."""
        return self.held and connection.vendor == "postgresql"

    def verify(self) -> None:
        """Check, with one cheap query, that this process still holds the advisory lock.

        Raise OwnershipLost when the lock's session was ended while the server
        stayed up (someone else may own the database now), and Django's
        OperationalError while the server cannot be reached (a hiccup: ask again).
        After a server restart every session ended, so no other worker can have
        held the lock throughout: take it again (OwnershipLost when another
        worker got there first). On SQLite the flocks cannot be lost.
        """
        if not self.can_be_lost:
            return
        if self._pg is not None:
            try:
                with self._pg.cursor() as cursor:
                    cursor.execute("SELECT 1")
                return
            except psycopg.Error as exc:  # this connection is not Django's: psycopg's errors
                log.warning("the worker's lock connection failed: %s", exc)
                self._drop_pg()
        with connection.wrap_database_errors:  # unreachable: OperationalError, retried later
            started = self._server_started()
        if started != self._pg_started:
            log.warning("the database server restarted; taking the worker's lock again")
            try:
                with connection.wrap_database_errors:
                    self._take_advisory_lock()
            except AlreadyRunning:
                raise OwnershipLost() from None  # another worker took it meanwhile
            return
        raise OwnershipLost()

    def _take_file_lock(self, path: Path) -> None:
        """Take an exclusive, non-blocking flock on `path`.

        The lock belongs to the open file: if this process dies, the kernel frees
        it. No PID file, nothing to clean. Soft locks are refused: a marker file
        would survive a crash and lock the next owner out.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path, blocking=False, fallback_to_soft=False)
        try:
            lock.acquire()
        except LockHeld:
            raise AlreadyRunning() from None
        self._file_locks.append(lock)

    def _take_advisory_lock(self) -> None:
        # A connection of our own, outside Django's: Django may close or recycle its
        # connections, and the lock must live exactly as long as this process.
        pg = connection.get_new_connection(connection.get_connection_params())
        pg.autocommit = True
        with pg.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_lock(%s), pg_postmaster_start_time()", [ADVISORY_KEY]
            )
            held, started = cursor.fetchone()
        if not held:
            pg.close()
            raise AlreadyRunning()
        self._pg, self._pg_started = pg, started

    def _server_started(self) -> datetime:
        """Return when the server started, asked on a fresh connection (closed again)."""
        pg = connection.get_new_connection(connection.get_connection_params())
        try:
            with pg.cursor() as cursor:
                cursor.execute("SELECT pg_postmaster_start_time()")
                (started,) = cursor.fetchone()
        finally:
            pg.close()
        return started

    def _drop_pg(self) -> None:
        if self._pg is not None:
            pg, self._pg = self._pg, None
            try:
                pg.close()
            except Exception:  # a broken connection may complain while closing
                log.debug("closing the lock connection failed", exc_info=True)


def sqlite_lock_path() -> Path | None:
    """Return the lock file beside the SQLite database file (never the file itself), if any.

    The data dir's `worker.lock` cannot see a second data dir whose DATABASE_URL
    names the same file; a lock beside that file can.
    """
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
        return None  # an in-memory database belongs to one process anyway
    database = Path(name).resolve()
    return database.with_name(f"{database.name}.worker-lock")


def check_durable() -> None:
    """Refuse to run on PostgreSQL with synchronous_commit off (a state must be durable)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (value,) = cursor.fetchone()
    if str(value).lower() == "off":
        raise NotDurable()


def stand_by(acquire: Callable[[], None], *, poll: float = STANDBY_POLL) -> float:
    """Call `acquire` until it takes the owner's locks; return the seconds spent waiting.

    Log "standing by" at the first refusal and "took over" once the locks are ours.
    An flock is free the moment its owner dies, and a PostgreSQL advisory lock the
    moment the server sees the owner's connection drop; between tries the advisory
    lock is watched with one query on Django's connection, so no connection is opened
    per try. A database that does not answer meanwhile is logged and waited out.
    """
    started = time.monotonic()
    waiting = False
    while True:
        try:
            if advisory_lock_looks_free():
                acquire()
                break
        except AlreadyRunning:
            pass
        except (DatabaseError, psycopg.Error) as exc:
            log.warning("standing by: the database did not answer: %s", exc)
            if not connection.in_atomic_block:  # (a test's transaction is not broken)
                with contextlib.suppress(DatabaseError):
                    connection.close()  # a broken connection is kept; the next look reconnects
        if not waiting:
            log.info("%s", STANDING_BY)
            waiting = True
        time.sleep(poll)
    waited = time.monotonic() - started
    if waiting:
        log.info("took over: the previous owner's locks were free after %.1f s standing by", waited)
    return waited


def advisory_lock_looks_free() -> bool:
    """Say whether no session holds the worker's advisory lock (always True off PostgreSQL).

    Only a hint: another standby may take the lock first, and `acquire` then refuses.
    """
    if connection.vendor != "postgresql":
        return True  # the flocks are as cheap to try as to look at
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s AND objid = %s AND objsubid = 1)",
            [ADVISORY_KEY >> 32, ADVISORY_KEY & 0xFFFF_FFFF],
        )
        (free,) = cursor.fetchone()
    return bool(free)
