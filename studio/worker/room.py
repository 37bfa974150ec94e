"""Room in the archive for what a send would pay for.

A job Ember finishes is copied into the archive before anything else; on a disk that is
full or read-only the copy fails and the job waits in Ember, protected, for a person's
reconcile. A review saw the worker go on paying for 48 of 48 new jobs that way. Before a
send, the worker looks (one `statvfs`, no write) whether the archive's disk could take
one more image of the largest size it accepts, and the files a copy makes; if not, the
task waits, unsent and unpaid. A disk can refuse writes with room to spare by `statvfs`
(an I/O error, a quota): once a write to the archive failed, each look also reserves one
image's size in a file of its own (and takes it away), off the event loop, and sends wait
until that goes through.
"""

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.utils import timezone

from studio import originals, phrases

log = logging.getLogger("studio.worker")

WAIT = timedelta(seconds=30)  # before a task held back for room is looked at again
# Files a copy may make: the original's temporary file, its thumbnails. A disk can run out of
# them with bytes to spare (many small files), and the write then fails with ENOSPC too.
FILES_A_COPY = 8
T = TypeVar("T")


class Room:
    """The archive's room as this worker sees it: its disk, and how its last write went."""

    def __init__(self) -> None:
        self.failed = ""  # why a write to the archive failed; "" once a look's reserve went through
        self._failures = 0  # how many have failed: a look clears only what it saw
        self._lock = threading.Lock()  # the copies note failures from threads of their own

    async def refuses(self) -> str:
        """Say why the archive could not keep another image now; "" when it could."""
        why = archive_refuses()
        if why or not self.failed:
            return why
        # Off the loop: on a failing disk the reserve's fsync may hang, and every slot with it.
        seen = self._failures
        why = await asyncio.to_thread(_reserve)
        with self._lock:
            if self._failures == seen:  # no copy failed meanwhile: the look has the last word
                self.failed = why
            return why or self.failed

    def keep(self, write: Callable[..., T], *args: Any) -> T:
        """Run a write to the archive, noting a failure (only a look clears it: a save of
        bytes already stored writes nothing, and proves nothing about the disk)."""
        try:
            return write(*args)
        except OSError as exc:
            with self._lock:
                self._failures += 1
                self.failed = f"its last write failed: {_said(exc)}"
            raise


def archive_refuses() -> str:
    """Say why the archive could not keep another image now; "" when it could."""
    folder = originals.originals_dir()
    while not folder.exists() and folder != folder.parent:  # not made yet: its disk
        folder = folder.parent
    try:
        disk = os.statvfs(folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    if disk.f_flag & os.ST_RDONLY:
        return "its disk is read-only"
    free, cap = disk.f_bavail * disk.f_frsize, settings.AVATARS_MAX_IMAGE_BYTES
    if free < cap:
        return f"{_mb(free)} free on its disk, less than one image may take ({_mb(cap)})"
    if disk.f_files and disk.f_favail < FILES_A_COPY:  # f_files 0: a disk that counts none
        return (
            f"{disk.f_favail} files left on its disk, fewer than a copy may make ({FILES_A_COPY})"
        )
    return ""


def _reserve() -> str:
    """Reserve one image of the largest accepted size in a file of the archive's own, fsynced,
    and take it away; say why that failed, "" when it went through. `posix_fallocate` asks
    for the blocks as a copy's write would (a quota, a full disk refuse them), without
    writing them where the filesystem allows."""
    folder = originals.originals_dir()
    temp = folder / f".room.{os.urandom(6).hex()}{originals.TEMP_SUFFIX}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, settings.AVATARS_MAX_IMAGE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        return f"its last write failed: {_said(exc)}"
    try:
        temp.unlink()
    except OSError as exc:  # the room was there; the file is swept at the worker's next start
        log.warning("the archive's look at its room left %s: %s", temp, _said(exc))
    return ""


def _said(exc: OSError) -> str:
    """Say the disk's own words: a failed fsync's, under the sentence NotDurable makes."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    return cause.strerror or str(cause)


def held(why: str) -> tuple[str, datetime]:
    """Return a held-back task's phase (what a person reads beside it) and when it is due.

    Ending as every back-off's phase ends (`phrases.RETRIES_ITSELF`): the batch page works out
    how long is left from the due time, as a figure kept in the phase would go stale.
    """
    phase = f"Not sent: the archive could not keep the image ({why}){phrases.RETRIES_ITSELF}"
    return phase, timezone.now() + WAIT


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB"
