"""What a write that died leaves in the store: its temporary file (`originals.write_temp`).

Never an original: the scrub reports one, a restore's target may hold one, and the
worker removes the stale ones as it starts.
"""

import contextlib
import time
from pathlib import Path

from studio.originals import TEMP_SUFFIX, originals_dir
from studio.thumbs import thumbs_dir

# A temporary file younger than this may be a write in progress, not a dead process's.
STALE_AFTER = 10 * 60  # seconds


def temporary(name: str) -> bool:
    """Say whether `name` is a write's temporary file (`write_temp`), not an original."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def lost_and_found(path: Path) -> bool:
    """Say whether `path` is the `lost+found` folder mkfs makes at a disk's root: no original
    (the originals folder may be a disk of its own)."""
    return path.name == "lost+found" and path.is_dir() and not path.is_symlink()


def remove_stale_temp_files(older_than: float = STALE_AFTER) -> int:
    """Delete temporary files a dead write left in originals/ and thumbs/; return how many.

    Only files not modified for `older_than` seconds: a younger one may be a write
    still in progress in another process (the web process saving an upload).
    """
    cutoff = time.time() - older_than
    removed = 0
    # Thumbnails are written by write_atomically too, with the same temporary names.
    for directory in (originals_dir(), thumbs_dir()):
        if not directory.is_dir():
            continue
        for temp in directory.glob(f".*{TEMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):  # another sweep got there first
                if temp.stat().st_mtime < cutoff:
                    temp.unlink()
                    removed += 1
    return removed
