"""Advisory file locks (flock) held for a `with` block, across threads and processes."""

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held(path: Path, *, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """Hold an flock on `path` (made if missing), alone or `shared`, for the block.

    Yields True once held; with `wait` off, False at once, holding nothing, when another
    holder is in the way. Closing the descriptor lets the lock go.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)
