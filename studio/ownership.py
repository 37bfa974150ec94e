"""One owner per database (SPEC §6): the worker's locks, and the durability it insists on.

On every database the worker holds an flock on `worker.lock` in the data dir. An
flock only guards one machine, so on PostgreSQL it also holds a session-level
advisory lock on a connection of its own for its whole life: a second worker
anywhere is refused, and the lock goes when the owner's connection dies.
"""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from filelock import FileLock
from filelock import Timeout as LockHeld

LOCK_REFUSED = "Another Avatars worker already owns this database"
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


class Ownership:
    """The locks that make this process the database's one worker."""

    def __init__(self) -> None:
        self._file_lock: FileLock | None = None
        self._pg: Any = None  # the dedicated connection holding the advisory lock

    def acquire(self) -> None:
        """Take every lock, or raise AlreadyRunning / NotDurable holding none of them."""
        self._take_file_lock()
        try:
            if connection.vendor == "postgresql":
                check_durable()
                self._take_advisory_lock()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self._pg is not None:
            self._pg.close()  # ends the session, and with it the advisory lock
            self._pg = None
        if self._file_lock is not None:
            self._file_lock.release()
            self._file_lock = None

    def _take_file_lock(self) -> None:
        """Take the exclusive, non-blocking flock on `worker.lock`.

        The lock belongs to the open file: if this process dies, the kernel frees
        it. No PID file, nothing to clean. Soft locks are refused: a marker file
        would survive a crash and lock the next owner out.
        """
        data_dir = Path(settings.AVATARS_DATA_DIR)
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(data_dir / "worker.lock", blocking=False, fallback_to_soft=False)
        try:
            lock.acquire()
        except LockHeld:
            raise AlreadyRunning() from None
        self._file_lock = lock

    def _take_advisory_lock(self) -> None:
        # A connection of our own, outside Django's: Django may close or recycle its
        # connections, and the lock must live exactly as long as this process.
        pg = connection.get_new_connection(connection.get_connection_params())
        pg.autocommit = True
        with pg.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY])
            (held,) = cursor.fetchone()
        if not held:
            pg.close()
            raise AlreadyRunning()
        self._pg = pg


def check_durable() -> None:
    """Refuse to run on PostgreSQL with synchronous_commit off (a state must be durable)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (value,) = cursor.fetchone()
    if str(value).lower() == "off":
        raise NotDurable()
