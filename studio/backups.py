"""Backup of an install (docs/operations.md): the database first, then its originals.

Order matters while the worker runs. The database is copied first, as one consistent
snapshot (SQLite's online backup API, or pg_dump); then the originals the snapshot's
rows name. The worker stores an original before it writes the row naming it, so every
row in the snapshot names a file already on disk; an original stored after the snapshot
names no restored row, though a result among them is kept for its task (`back_up_landed`).
The other order could back up a row whose original is not in the backup. The manifest is
written last: a folder without one is not a finished backup.
"""

import contextlib
import errno
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from studio import originals, removals
from studio.models import Asset, Origin

MANIFEST = "manifest.json"
SQLITE_FILE = "db.sqlite3"
PG_DUMP_FILE = "db.pgdump"
FORMAT = 2  # the manifest's layout (2: it records the database snapshot's sha256 and size)
# A hard link fails with these where the filesystem allows none (or DEST is on another one).
LANDED_PASSES = 3  # looks for results stored while a backup ran (`back_up_landed`)
NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


class BackupError(Exception):
    """A backup or restore cannot go on: the message says why, for people."""


class Placer:
    """Put originals in place, each checked against its hash on the way.

    Copies written and fsynced as the originals store writes them; with `link`, hard
    links while the filesystem allows them (the same bytes, no second copy: a write into
    one file is then in both).
    """

    def __init__(self, *, link: bool = False, follow: bool = True) -> None:
        self.link = link
        self.follow = follow  # read an original through a symbolic link (a restore does not)
        self.linked = 0
        self.copied = 0
        self.in_place = 0  # already there, whole: neither linked nor copied by this run
        # Where `source` was read whole: what the same run could place there again.
        self.from_source: list[Path] = []

    def place(self, source: Path, target: Path, sha256: str) -> bool:
        """Put `source` at `target`; return False, placing nothing, if it fails its hash.

        Raises FileNotFoundError when `source` is not there, NotAnOriginal when it is
        not a regular file of at most the image cap (a folder, a device, a pipe: nothing
        is read from those). A `target` already holding these bytes is left as it is,
        whatever `source` holds (a review's restore reported as corrupt in its backup an
        original whose copy in place was whole).
        """
        if in_place(source, target) and originals.file_sha256(target) == sha256:
            self.in_place += 1  # put there by an earlier run of the same restore
            return True
        data = originals.read_regular(source, links=self.follow)
        if originals.sha256_of(data) != sha256:
            return False
        self.from_source.append(target)
        # A hard link to a symbolic link is that link again (link(2) does not follow it),
        # not the bytes: those are copied, so the backup holds them itself.
        if self.link and not source.is_symlink():
            try:
                os.link(source, target)
                self.linked += 1
                return True
            except OSError as exc:
                if exc.errno not in NO_LINK:
                    raise
                self.link = False  # DEST is on another filesystem: copy from now on
        originals.write_atomically(target, data)
        self.copied += 1
        return True

    def counts(self, noun: str) -> str:
        total = self.linked + self.copied + self.in_place
        there = f", {self.in_place} already in place" if self.in_place else ""
        return (
            f"{noun} {total} original{'' if total == 1 else 's'}: {self.linked} hard-linked, "
            f"{self.copied} copied{there}, each checked against its hash."
        )


def in_place(source: Path, target: Path) -> bool:
    """Say whether `target` is a file of its own: not a link, nor the backup's file itself
    (a hard link into the backup would share every later write with it: a review's)."""
    if not target.is_file() or target.is_symlink():
        return False
    try:
        return not os.path.samefile(source, target)
    except OSError:
        return True  # no such source: the file in place is the only one to look at


@dataclass
class Backup:
    dest: Path
    database: str  # connection.vendor: "sqlite" or "postgresql"
    database_file: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    placer: Placer = field(default_factory=Placer)
    landed: int = 0  # results the worker stored after the snapshot, in it too


class Terminated(Exception):
    """A SIGTERM (a service manager stopping it, `kill`) stopped a backup or a restore."""


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """While the block runs, a SIGTERM stops it as a Ctrl-C does: with a sentence, and a
    restore takes away what it placed (the default would end the process where it stood)."""

    def stop(_signum: int, _frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def not_stopped() -> Iterator[None]:
    """While the block runs, a Ctrl-C or a SIGTERM is ignored: a restore's undo, which a
    second Ctrl-C would otherwise leave half done under a sentence saying it was done."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# What stops a backup or a restore part way (a full disk, a folder that cannot be made, a
# Ctrl-C, a SIGTERM), said as a sentence by the commands (`cause`), not as a traceback.
STOPPED_BY: tuple[type[BaseException], ...] = (
    OSError,
    DatabaseError,
    sqlite3.Error,
    KeyboardInterrupt,
    Terminated,
)


def cause(exc: BaseException) -> str:
    """Say, for an operator, what stopped a backup or a restore ("the disk is full: /x/y")."""
    if isinstance(exc, KeyboardInterrupt):
        return "it was interrupted (Ctrl-C)"
    if isinstance(exc, Terminated):
        return "it was stopped (SIGTERM)"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{(exc.strerror or str(exc)).rstrip('.')}{where}"
    return str(exc).strip().rstrip(".") or type(exc).__name__


def backup(dest: Path, *, link: bool = False) -> Backup:
    """Snapshot the database into `dest`, then the originals its rows name, then a manifest.

    The originals are copied; with `link`, hard-linked where the filesystem allows.
    """
    kind = connection.vendor
    if kind == "postgresql" and shutil.which("pg_dump") is None:
        raise BackupError(pg_dump_howto(dest))
    if kind not in ("sqlite", "postgresql"):
        raise BackupError(f"Backups support SQLite and PostgreSQL, not {kind}.")
    folder = originals.originals_dir()
    if not folder.is_dir() and Asset.objects.exists():
        # Every original "missing" at once is the wrong data dir, or a disk not mounted.
        raise BackupError(
            f"The originals folder {folder} is not there, while the database names "
            "originals: is AVATARS_DATA_DIR this install's, and its disk mounted? Nothing "
            "was backed up."
        )
    start_empty(dest)
    # From before the snapshot until its originals are copied, a photo's removal writes
    # down its unlink instead of doing it (removals.py): every file a row names is there.
    with removals.backing_up():
        result = _snapshot_and_originals(dest, kind, link)
    removals.finish_pending()
    write_manifest(result)
    return result


def _snapshot_and_originals(dest: Path, kind: str, link: bool) -> Backup:
    """Snapshot the database into `dest`, then copy in the originals its rows name."""
    named: Iterable[tuple[str, str]]
    if kind == "sqlite":
        result = Backup(dest=dest, database=kind, database_file=SQLITE_FILE)
        result.placer.link = link
        copy_sqlite(Path(connection.settings_dict["NAME"]), dest / SQLITE_FILE)
        named = originals_in_sqlite(dest / SQLITE_FILE)
    else:
        result = Backup(dest=dest, database=kind, database_file=PG_DUMP_FILE)
        result.placer.link = link
        # The dump's rows, read around it: a row removed after the dump is in the first
        # read, one made during it in the second. (One made and removed while the dump
        # ran, but in it, is missed: restored, it names a file the backup lacks.)
        before = set(_asset_files())
        dump_postgres(dest / PG_DUMP_FILE)
        named = sorted(before | set(_asset_files()))
    (dest / "originals").mkdir(mode=0o700)
    done: set[tuple[str, str]] = set()
    for sha256, mime in named:
        back_up_original(result, sha256, mime)
        done.add((sha256, mime))
    back_up_landed(result, done)
    originals.fsync_dir(dest / "originals")
    return result


def back_up_landed(result: Backup, done: set[tuple[str, str]]) -> None:
    """Put into the backup the results the worker stored while it ran, as far as it can.

    The snapshot holds their tasks `running` or `copying`, and Ember may let go of its copy
    (then remove it) as soon as the worker has stored one: restored, such a task finds
    its bytes only here (the worker's copy takes an archived file that hashes to Ember's
    claim). Read from the live rows, which the worker writes before each release; again
    while some land during the last pass, a few passes at most. Uploads are left out: no
    task of the snapshot names them.
    """
    for _ in range(LANDED_PASSES):
        rows = Asset.objects.filter(origin=Origin.GENERATED).values_list("sha256", "mime")
        landed = sorted(set(rows.distinct().iterator()) - done)
        if not landed:
            return
        for sha256, mime in landed:
            done.add((sha256, mime))
            # One that fails is no row of the snapshot's: check_originals says what is wrong.
            with contextlib.suppress(FileNotFoundError, originals.NotAnOriginal):
                if _place(result, originals.path_of(sha256, mime), sha256):
                    result.landed += 1


def _asset_files() -> Iterator[tuple[str, str]]:
    """Yield each (sha256, mime) the asset rows name, once."""
    rows = Asset.objects.order_by("sha256").values_list("sha256", "mime").distinct()
    yield from rows.iterator()


def start_empty(dest: Path) -> None:
    store = originals.originals_dir().resolve()
    if dest.resolve().is_relative_to(store):
        raise BackupError(f"{dest} is inside the originals store {store}: back up elsewhere.")
    data_dir = Path(settings.AVATARS_DATA_DIR).resolve()
    if dest.resolve().is_relative_to(data_dir):
        # It would die with the data dir's disk; inside thumbs/, a cache, it would be cleared.
        raise BackupError(
            f"{dest} is inside the data dir {data_dir}: a backup there goes with the "
            "install's own disk. Back up elsewhere, best onto another disk."
        )
    if dest.exists() and not dest.is_dir():
        raise BackupError(f"{dest} is not a folder: back up into a new folder.")
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} is not empty: back up into a new folder.")
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)


def back_up_original(result: Backup, sha256: str, mime: str) -> None:
    """Put one original the snapshot names into the backup, or say why not."""
    source = originals.path_of(sha256, mime)
    try:
        placed = _place(result, source, sha256)
    except FileNotFoundError:
        result.missing.append(source.name)
        result.problems.append(f"missing in the data dir: {source.name}")
        return
    except originals.NotAnOriginal as exc:
        result.corrupt.append(source.name)
        result.problems.append(f"not an original in the data dir: {source.name} ({exc})")
        return
    if not placed:
        result.corrupt.append(source.name)
        result.problems.append(f"fails its hash in the data dir: {source.name}")


def _place(result: Backup, source: Path, sha256: str) -> bool:
    """Put the original at `source` into the backup and list it in the manifest's entries;
    False, placing nothing, when it fails its hash (Placer.place's errors pass through)."""
    target = result.dest / "originals" / source.name
    if not result.placer.place(source, target, sha256):
        return False
    size = target.stat().st_size
    result.entries.append({"file": source.name, "sha256": sha256, "size": size})
    return True


def copy_sqlite(source: Path, target: Path, *, read_only: bool = False) -> None:
    """Copy a SQLite database, live or not, into `target` with the online backup API.

    `read_only`: a backup's snapshot, whose own bytes only are read (`sqlite_read_only`).
    """
    if not target.exists():
        # SQLite would create it world-readable; a database holds tokens' hashes and more.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    opened = sqlite_read_only(source) if read_only else sqlite3.connect(source, timeout=30)
    with (
        closing(opened) as live,
        closing(sqlite3.connect(target, timeout=30)) as copy,
    ):
        # One step: one read transaction, so one consistent snapshot. In WAL mode it
        # does not block the worker's writes, and they do not restart it.
        live.backup(copy)
        # One self-contained file: no -wal beside it to forget when it is copied on.
        copy.execute("PRAGMA journal_mode=DELETE")
    originals.fsync_file(target)
    originals.fsync_dir(target.parent)


def sqlite_read_only(database: Path) -> sqlite3.Connection:
    """Open `database` to read its own bytes only: no side file beside it is read or made.

    `immutable`: SQLite then plays no write-ahead log or journal beside it into what it
    reads (a review restored rows a `-wal` file beside a snapshot carried, which the
    manifest's hash does not cover, and the restore wrote them into the backup's file).
    """
    return sqlite3.connect(f"{database.as_uri()}?mode=ro&immutable=1", uri=True)


def originals_in_sqlite(database: Path) -> Iterator[tuple[str, str]]:
    """Yield each (sha256, mime) the snapshot's asset rows name, once."""
    table = Asset._meta.db_table
    with closing(sqlite3.connect(database)) as conn:
        yield from conn.execute(f"SELECT DISTINCT sha256, mime FROM {table} ORDER BY sha256")


def write_manifest(result: Backup) -> None:
    snapshot = result.dest / result.database_file
    manifest = {
        "format": FORMAT,
        "created_at": timezone.now().isoformat(),
        "database": result.database,
        "database_file": result.database_file,
        # Restore refuses a snapshot that is not these bytes (cut short, replaced, lost).
        "database_sha256": originals.file_sha256(snapshot),
        "database_size": snapshot.stat().st_size,
        "originals": result.entries,
        "missing": result.missing,
        "corrupt": result.corrupt,
    }
    data = json.dumps(manifest, indent=1).encode()
    originals.write_atomically(result.dest / MANIFEST, data)
    originals.fsync_dir(result.dest)


def dump_postgres(target: Path) -> None:
    run_pg("pg_dump", "--format=custom", "--no-owner", f"--file={target}")
    originals.fsync_file(target)


def run_pg(tool: str, *args: str) -> None:
    """Run a PostgreSQL client tool against this database; the password goes by environment."""
    path = shutil.which(tool)
    if path is None:
        raise BackupError(f"{tool} is not on PATH: install the PostgreSQL client tools.")
    db = connection.settings_dict
    env = {**os.environ, "PGDATABASE": str(db["NAME"])}
    for key, var in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER")):
        if db.get(key):
            env[var] = str(db[key])
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])  # not in argv, where `ps` would show it
    done = subprocess.run([path, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BackupError(f"{tool} failed: {done.stderr.strip() or done.returncode}")


def pg_dump_howto(dest: Path) -> str:
    return (
        "This studio runs on PostgreSQL and pg_dump is not on PATH, so nothing was backed "
        "up. Install the PostgreSQL client tools (e.g. apt-get install postgresql-client) "
        "and run this again, or do it by hand in this order: first "
        f"`pg_dump --format=custom --file={dest}/{PG_DUMP_FILE}` against this database, "
        f"then copy {originals.originals_dir()} into {dest}/originals. The dump first: "
        "an original is stored before its row, so every row in the dump has its file."
    )
