"""Durable writes: a file's bytes or a folder's names flushed to the disk, or NotDurable.

An fsync that fails is final for that write: the kernel may have dropped the dirty pages
and reports the error only once, so retrying it proves nothing.
"""

import os
from pathlib import Path


class NotDurable(OSError):
    """The disk did not confirm a write (fsync failed): the bytes may not survive a crash.

    Final for that write: retrying the fsync proves nothing, because the kernel may
    have dropped the dirty pages and reports the error only once.
    """


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable, or raise NotDurable."""
    fsync_path(directory, f"the folder {directory.name}")


def fsync_file(path: Path) -> None:
    """Make the bytes of the file at `path` durable, or raise NotDurable."""
    fsync_path(path, f"the file {path.name}")


def fsync_path(path: Path, what: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd, what)
    finally:
        os.close(fd)


def fsync(fd: int, what: str) -> None:
    """Flush `fd` to the disk, or raise NotDurable saying what the disk did not confirm."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise NotDurable(f"The disk did not confirm {what}: {exc.strerror or exc}") from exc
