"""Unlinking originals nothing needs any longer, never from under a running backup.

A backup snapshots the database, then copies the originals the snapshot's rows name. A
photo removed in between is still named by the snapshot: unlinked at once, its original
would be missing from the backup (reported as damage to the live store, restored as a
row without its file). So a backup holds `backup.lock` (shared) from before its snapshot
until its originals are copied, and a removal that finds it held writes down what it
would unlink (`removals.pending`) instead; the backup's end, or the next removal, does
it, once no backup runs, for each file no asset row has come to stand on meanwhile.
"""

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings

from studio import flocks, originals
from studio.models import Asset

BACKUP_LOCK = "backup.lock"  # in the data dir: shared by backups, taken alone to unlink
PENDING = "removals.pending"  # in the data dir: "<sha256> <mime>" a line


def _data_dir() -> Path:
    return Path(settings.AVATARS_DATA_DIR)


@contextlib.contextmanager
def backing_up() -> Iterator[None]:
    """Hold off the unlinking of originals while a backup snapshots and copies them."""
    with flocks.held(_data_dir() / BACKUP_LOCK, shared=True):
        yield


def unlink(files: Iterable[tuple[str, str]]) -> bool:
    """Unlink these originals now, or write them down while a backup runs; True if now.

    The caller holds the originals' naming lock and has checked no row stands on them.
    """
    files = list(files)
    if not files:
        return True
    with flocks.held(_data_dir() / BACKUP_LOCK, wait=False) as alone:
        if alone:
            for sha256, mime in files:
                originals.path_of(sha256, mime).unlink(missing_ok=True)
            return True
    with (_data_dir() / PENDING).open("a") as pending:
        pending.writelines(f"{sha256} {mime}\n" for sha256, mime in files)
    return False


def finish_pending() -> int:
    """Unlink what removals wrote down during a backup, if none runs now; return how many.

    Looked at again under the naming lock: a file an asset row has come to stand on since
    (the same photo uploaded again, a result of the same bytes) stays.
    """
    path = _data_dir() / PENDING
    if not path.exists():
        return 0
    with originals.naming(), flocks.held(_data_dir() / BACKUP_LOCK, wait=False) as alone:
        if not alone or not path.exists():
            return 0
        entries = {tuple(line.split()) for line in path.read_text().splitlines()}
        files = {(e[0], e[1]) for e in entries if len(e) == 2}
        standing = standing_on({sha256 for sha256, _ in files})
        gone = 0
        for sha256, mime in files:
            if sha256 in standing:
                continue
            with contextlib.suppress(ValueError):  # a line naming no original: skipped
                originals.path_of(sha256, mime).unlink(missing_ok=True)
                gone += 1
        path.unlink()
    return gone


def standing_on(hashes: set[str]) -> set[str]:
    """Return those of `hashes` that an asset row stands on."""
    return set(Asset.objects.filter(sha256__in=hashes).values_list("sha256", flat=True))
