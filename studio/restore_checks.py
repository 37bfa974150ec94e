"""What a restore checks in a backup before it places anything (docs/operations.md).

The manifest: a regular file of a bounded size, in a shape this version can trust. The
database snapshot: there, the bytes the manifest recorded, and readable whole by SQLite
without anything beside it being read or written (a backup is never written). The
originals folder: the backup's own, not a link to another place. And, on the target's
side, what SQLite would play into the database restored, and the database filled, whole.
"""

import json
import os
import sqlite3
import stat
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

from django.db.migrations.loader import MigrationLoader

from studio import originals
from studio.backups import MANIFEST, BackupError, sqlite_read_only
from studio.models import Task

# A manifest lists each original in about 150 bytes: 64 MB is some 400,000 originals,
# past any family's archive. A larger one, or one that is no regular file (a pipe that
# never ends, a link to /dev/zero), is not read: a review hung a restore on a pipe and
# ran another out of memory on /dev/zero.
MANIFEST_MAX = 64 * 1024 * 1024
# Beside a SQLite file, what SQLite plays into it when it opens it: a write-ahead log, its
# index, a rollback journal. Left by another database, they would be played into the
# restored one: a mix of its rows and theirs, or a damaged file (found by a review).
SIDE_FILES = ("-wal", "-shm", "-journal")


def read_manifest(src: Path) -> dict[str, Any]:
    """Return the backup's manifest, refusing one this version cannot trust the shape of.

    Format 2 records the database snapshot's sha256 and size, and must; format 1 (older
    backups) did not, so only its readability can be checked.
    """
    manifest = json_object(manifest_text(src))
    unreadable = f"{src / MANIFEST} is not a manifest this version can read"
    if manifest is None or manifest.get("format") not in (1, 2):
        raise BackupError(f"{unreadable}.")
    if manifest.get("database") not in ("sqlite", "postgresql"):
        raise BackupError(f"{unreadable}: it names no database kind.")
    if not isinstance(manifest.get("originals"), list):
        raise BackupError(f"{unreadable}: it lists no originals.")
    if manifest["format"] == 2 and not (
        isinstance(manifest.get("database_sha256"), str)
        and type(manifest.get("database_size")) is int
    ):
        raise BackupError(f"{unreadable}: it records no sha256 and size for its database.")
    return manifest


def manifest_text(src: Path) -> str:
    """Return the manifest's text: a regular file (not a link) of at most MANIFEST_MAX bytes."""
    path = src / MANIFEST
    try:
        info = path.lstat()
    except NotADirectoryError:
        raise BackupError(f"{src} is not a folder: name the backup's folder.") from None
    except FileNotFoundError:
        if not src.is_dir():
            raise BackupError(f"There is no folder {src}: name the backup's folder.") from None
        raise BackupError(
            f"{src} has no {MANIFEST}: it is not a finished backup "
            "(a backup writes its manifest last)."
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise BackupError(
            f"{path} is not a regular file (a backup writes its manifest as one): "
            "it is not a finished backup. Nothing was restored."
        )
    if info.st_size > MANIFEST_MAX:
        raise BackupError(
            f"{path} is {info.st_size} bytes, more than a manifest this version writes "
            f"({MANIFEST_MAX} at most). Nothing was restored."
        )
    # Opened without following a link, nor waiting on a pipe put there since the look.
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise BackupError(f"{path} is not a regular file. Nothing was restored.")
        data = file.read(MANIFEST_MAX + 1)
    try:
        return data.decode()
    except UnicodeDecodeError:
        return ""  # read as no manifest: "not a manifest this version can read"


def json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def refuse_linked_originals(src: Path) -> None:
    """Refuse a backup whose originals folder is a link to somewhere else.

    A backup holds its originals itself; through a link, a restore would read and report
    as the backup's whatever folder the link names (a review).
    """
    folder = src / "originals"
    if folder.is_symlink():
        raise BackupError(
            f"{folder} is a symbolic link, not the backup's own folder: a backup holds its "
            "originals itself. Nothing was restored."
        )


def check_snapshot(snapshot: Path, manifest: dict[str, Any], *, readable: bool) -> None:
    """Refuse a database snapshot that is missing, not the recorded bytes, or unreadable.

    A SQLite snapshot is opened read-only: nothing in the backup is written.
    """
    if not snapshot.is_file():
        raise BackupError(f"{snapshot} is missing: this backup has no database to restore.")
    size, sha256 = manifest.get("database_size"), manifest.get("database_sha256")
    if size is not None and snapshot.stat().st_size != size:
        raise BackupError(
            f"{snapshot} is {snapshot.stat().st_size} bytes; the manifest recorded {size}: "
            "it was cut short or replaced. Nothing was restored."
        )
    if sha256 is not None and originals.file_sha256(snapshot) != sha256:
        raise BackupError(
            f"{snapshot} does not match the sha256 the manifest recorded: it was changed "
            "after the backup. Nothing was restored."
        )
    if readable:
        check_sqlite(snapshot)


def check_sqlite(snapshot: Path) -> None:
    """Refuse a SQLite file its library cannot read whole (opened read-only)."""
    try:
        with closing(sqlite_read_only(snapshot)) as conn:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            has_tasks = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = ?", (Task._meta.db_table,)
            ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(
            f"{snapshot} is not a readable SQLite database ({exc}). Nothing was restored."
        ) from None
    if verdict != "ok":
        raise BackupError(f"{snapshot} is damaged ({verdict}). Nothing was restored.")
    if not has_tasks:
        raise BackupError(f"{snapshot} holds no Avatars tables. Nothing was restored.")


def side_files(database: Path) -> list[Path]:
    """Return the side files SQLite would play into `database` that are there."""
    return [
        side
        for side in (database.with_name(f"{database.name}{end}") for end in SIDE_FILES)
        if side.exists()
    ]


def refuse_side_files(database: Path) -> None:
    """Refuse, naming them, side files beside `database` that SQLite would play into it."""
    found = side_files(database)
    if found:
        names = " and ".join(str(side) for side in found)
        are, them = ("is", "it") if len(found) == 1 else ("are", "them")
        raise BackupError(
            f"{names} {are} left beside {database} from an earlier database, and SQLite "
            f"would play {them} into the restored one: with no studio process running on "
            f"this data dir, remove {them} and run the restore again. Nothing was restored."
        )


def check_filled(database: Path) -> None:
    """Refuse a filled database that SQLite does not find whole (`PRAGMA integrity_check`)."""
    try:
        with closing(sqlite3.connect(database)) as conn:
            verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        raise BackupError(
            f"The restored database was damaged as it was filled ({verdict}), so it was not "
            "put in place and what was placed was taken away: check the disk, then run the "
            "restore again."
        )


def refuse_newer(applied: Iterable[tuple[str, str]], snapshot: Path) -> None:
    """Refuse a snapshot whose database has migrations this version does not have.

    A newer version's tables would be written wrongly by this one: a review's restored with
    exit 0, `migrate` had nothing to do, and every new batch failed (a column this version
    does not fill). An older snapshot is fine: `migrate` brings it up to date.
    """
    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    unknown = sorted(f"{app}.{name}" for app, name in set(applied) - known)
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise BackupError(
            f"{snapshot} was made by a newer version of Avatars: its database has migrations "
            f"this version does not have ({', '.join(unknown[:3])}{more}). Restore it with "
            "that version or a later one. Nothing was restored."
        )
