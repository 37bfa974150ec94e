"""Restore of a backup into a new install (docs/operations.md): check, place, fill, hold back.

Everything that can be checked is checked before anything is placed: the manifest, the
database snapshot (there, the bytes the manifest recorded, readable by its database),
and the target (no originals, no tables, no side files another SQLite database left).
Then the originals, each copied and checked against its hash; then the database, checked
whole before it is put in place. If filling the database fails, what was placed is taken
away again, so the same restore can simply be run again. One restore runs into a data dir
at a time: it holds `restore.lock` there (an flock) from its first check to its end.

The tasks the snapshot holds as waiting to be sent are held back before the database
is in place: the install that was lost may have sent them after the snapshot, and an
image has no key to make a second send free. They rest `uncertain` with the send they
may have had recorded as unknown, so the worker looks for them in Ember's history
before anyone pays again; so do the tasks that had failed with nothing sent, which a
person may have queued again since (`studio/holdback.py`). Until the restore has
finished, a marker in the data dir keeps the worker from starting; running the same
restore again finishes it. Once it has, `RESTORED` says from which backup, so the same
restore run again (after a kill in its last moment) says it had finished.
"""

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder

from studio import flocks, leftovers, originals
from studio.backups import (
    PG_DUMP_FILE,
    SQLITE_FILE,
    BackupError,
    Placer,
    cause,
    copy_sqlite,
    not_stopped,
    originals_in_sqlite,
    run_pg,
)
from studio.holdback import hold_back
from studio.models import Asset, WorkerHeartbeat
from studio.originals import fsync_file
from studio.restore_checks import (
    check_filled,
    check_snapshot,
    read_manifest,
    refuse_linked_originals,
    refuse_newer,
    refuse_side_files,
    side_files,
)
from studio.restore_marker import (
    DONE,
    MARKER,
    database_named,
    finished_from,
    mark,
    resumable,
)
from studio.restore_marker import RestoreUnfinished as RestoreUnfinished  # where callers look
from studio.restore_marker import unfinished as unfinished

NOT_EMPTY = "restore into a new data dir with an empty database."
LOCK = "restore.lock"  # in the data dir: held (flock) by the one restore that runs


class AlreadyRestored(Exception):
    """The data dir was restored from this backup already: the restore had finished."""

    def __init__(self, src: Path) -> None:
        super().__init__(
            f"This data dir was restored from {src} already: that restore finished (it may "
            "have been stopped just after). Nothing was changed."
        )


@dataclass
class Restored:
    database: str  # what was filled: the SQLite file, or the PostgreSQL database's name
    restored: int = 0
    held_back: int = 0  # tasks the lost install may have sent after the snapshot, now `uncertain`
    taken: str = ""  # when the backup was taken, as its manifest says (ISO 8601)
    problems: list[str] = field(default_factory=list)
    # Only the backup's own files: an original that is a link is reported, not followed.
    placer: Placer = field(default_factory=lambda: Placer(follow=False))


def restore(src: Path, *, data_dir: Path | None = None, database: Path | None = None) -> Restored:
    """Restore the backup in `src` into a new data dir (default: this install's).

    `database` is the SQLite file to fill (default: the configured one). Refuses a
    target that already has a database or originals (unless an unfinished restore
    left them), a SQLite file with another database's side files beside it, and a
    backup whose snapshot is missing or damaged, before placing anything. A failure
    takes away what this run placed. One restore at a time: a second, into the same
    data dir while one runs, is refused at once and touches nothing.
    """
    data_dir = data_dir or Path(settings.AVATARS_DATA_DIR)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Held for the whole run, and let go by the kernel when a killed run's process ends,
    # so that running the same restore again after a kill still finishes the job.
    with flocks.held(data_dir / LOCK, wait=False) as alone:
        if not alone:
            raise BackupError(
                f"A restore into this data dir is running now ({data_dir / LOCK} is held): "
                "let it finish, or stop it and run the same restore again. Nothing was changed."
            )
        _no_worker(data_dir)
        return restore_alone(src, data_dir, database)


def _no_worker(data_dir: Path) -> None:
    """Refuse a data dir a worker runs on: it drives the files a restore replaces (a
    review's went on against the database deleted under it, and held the restored one)."""
    with flocks.held(data_dir / "worker.lock", wait=False) as free:
        if not free:
            raise BackupError(
                f"A worker runs on this data dir ({data_dir / 'worker.lock'} is held): stop "
                "it, then run the restore again. Nothing was changed."
            )


def restore_alone(src: Path, data_dir: Path, database: Path | None) -> Restored:
    """Restore as `restore` says, holding the data dir's restore lock."""
    manifest = read_manifest(src)
    kind = "sqlite" if database is not None else connection.vendor
    if manifest["database"] != kind:
        raise BackupError(
            f"{src} holds a {manifest['database']} database; this studio uses {kind}."
        )
    refuse_linked_originals(src)
    snapshot = src / (SQLITE_FILE if kind == "sqlite" else PG_DUMP_FILE)
    check_snapshot(snapshot, manifest, readable=kind == "sqlite")
    if kind == "sqlite":
        database = database or Path(connection.settings_dict["NAME"])
    elif shutil.which("pg_restore") is None:
        raise BackupError(pg_restore_howto(src))
    marker = data_dir / MARKER
    check_target(src, data_dir, database, marker)
    result = Restored(
        database=str(database or connection.settings_dict["NAME"]),
        taken=str(manifest.get("created_at", "")),
    )
    target = data_dir / "originals"
    with contextlib.ExitStack() as finishing:
        try:
            mark(marker, str(src), into=database_named(database))
            fill(result, src, manifest, target, database)
            # From here on a stop lets it finish: it was said to be taken away (a review).
            finishing.enter_context(not_stopped())
        except BaseException as exc:
            with not_stopped():  # quick, and a second Ctrl-C must not leave it half done
                kept = undo(result.placer.from_source, manifest_files(manifest, target), database)
                if not kept or not marker.exists():
                    marker.unlink(missing_ok=True)
                    raise
            raise Stopped(exc, kept, copied=bool(result.placer.from_source)) from exc
        finish(src, data_dir, marker)
    return result


class Stopped(BackupError):
    """A restore stopped part way, leaving originals it could not give back in place."""

    def __init__(self, exc: BaseException, kept: int, *, copied: bool) -> None:
        said = f"The restore stopped: {cause(exc)}."
        if isinstance(exc, BackupError):  # its own sentence, but something stays (below)
            said = str(exc).removesuffix(" Nothing was restored.")
        took = "It took away the originals it had copied" if copied else "It had copied none"
        super().__init__(
            f"{said} {took}; {kept} more files under the names of the backup's originals were "
            f"in place before it ran and stay there, and {MARKER} keeps this install from "
            "starting until the same restore, run again, finishes it (or use a new data dir)."
        )


def check_target(src: Path, data_dir: Path, database: Path | None, marker: Path) -> None:
    """Refuse a data dir this restore may not fill; AlreadyRestored when it did already.

    A restore that finished (`RESTORED` names its backup) is not done again while its
    database has tables. Without them it runs again over the originals it placed: told
    "nothing was changed", a review's install with its database removed came up empty.
    """
    finished = not marker.exists() and finished_from(data_dir) == str(src)
    if finished:
        try:
            if has_tables(database):
                raise AlreadyRestored(src)
        except sqlite3.DatabaseError as exc:  # said as what it is, not as a stopped restore
            raise BackupError(
                f"The database {database} is not an empty SQLite database ({exc}): {NOT_EMPTY}"
            ) from None
    # Empty: a run killed while it made the marker (as versions before the atomic one
    # could be), before it placed anything. The target is then as it was before it.
    if not finished and (not marker.exists() or not marker.read_text().strip()):
        refuse_a_used_target(data_dir, database)
    elif marker.exists():
        resumable(marker, src, into=database_named(database))
    if database is not None:
        refuse_side_files(database)  # after: a database in use has tables, said first


def manifest_files(manifest: dict[str, Any], target: Path) -> Iterator[Path]:
    """Yield where each original the manifest names goes in `target` (names the store gives)."""
    for entry in manifest["originals"]:
        sha256, name = entry_of(entry)
        if is_original_name(sha256, name):
            yield target / name


def entry_of(entry: object) -> tuple[str, str]:
    """Return a manifest entry's sha256 and file name ("" for what it lacks)."""
    entry = entry if isinstance(entry, dict) else {}
    return str(entry.get("sha256", "")), str(entry.get("file", ""))


def is_original_name(sha256: str, name: str) -> bool:
    """Say whether `name` is one the store would give: a manifest must not write outside
    originals/."""
    try:
        originals.path_for(sha256, name.removeprefix(sha256))
    except ValueError:
        return False
    return True


def finish(src: Path, data_dir: Path, marker: Path) -> None:
    """Say in the data dir that the restore from `src` finished, and take the marker away.

    Quick, and a stop now would find the restore finished, or about to be: it finishes. A
    disk that refuses these last writes leaves everything in place and the marker there,
    which the same restore, run again, finishes (it was said to be taken away: a review).
    """
    try:
        with not_stopped():
            originals.write_atomically(data_dir / DONE, f"restored {src}\n".encode())
            marker.unlink()
            originals.fsync_dir(data_dir)
    except OSError as exc:
        if not marker.exists():  # only the last flush failed: the restore had finished
            raise BackupError(
                f"The restore finished, but its last write may not be on the disk: "
                f"{cause(exc)}. Everything it restored is in place: check the disk."
            ) from None
        raise BackupError(
            f"The restore stopped in its last step: {cause(exc)}. Everything it restored is "
            f"in place, and {marker.name} keeps this install from starting until the same "
            "restore, run again, finishes it."
        ) from None


def fill(
    result: Restored,
    src: Path,
    manifest: dict[str, Any],
    target: Path,
    database: Path | None,
) -> None:
    """Place the originals, fill the database with its unsent tasks held back, check both.

    On SQLite the database is made ready aside first: a snapshot this version cannot
    fill is refused before any original is placed (a review's were copied, then taken
    away, under advice to run the same restore again).
    """
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    ready = None if database is None else prepare_sqlite(result, src / SQLITE_FILE, database)
    names: set[str] = set()
    for entry in manifest["originals"]:
        restore_original(result, src / "originals", target, entry, names)
    originals.fsync_dir(target)
    if ready is not None and database is not None:
        named = fill_sqlite(ready, database)
    else:
        named = fill_postgres(result, src / PG_DUMP_FILE)
    result.problems += unrestored(named, target, result.problems)


def prepare_sqlite(result: Restored, snapshot: Path, database: Path) -> Path:
    """Return a copy of the snapshot beside `database`, its unsent tasks held back, whole.

    Copied by SQLite from the snapshot's own bytes (a side file beside it in the backup
    is neither read nor written), and checked whole: a damaged copy is never put in place.
    """
    connection.close()  # Django's connection must not hold the file while it is filled
    ready = database.with_name(f"{database.name}.restoring")
    for leftover in (ready, *side_files(ready)):  # what a killed run of this restore left
        leftover.unlink(missing_ok=True)
    copy_sqlite(snapshot, ready, read_only=True)
    try:
        with closing(sqlite3.connect(ready)) as conn:
            refuse_newer(conn.execute("SELECT app, name FROM django_migrations"), snapshot)
            result.held_back = settle(conn.cursor(), marker="?")
            conn.commit()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_ERROR:
            raise  # the disk (full, failing): said as such, and the same restore run again
        raise BackupError(
            f"{snapshot} holds tables this version of Avatars cannot restore into ({exc}): "
            "a backup of another version of Avatars, or not of Avatars. Restore it with the "
            "version that made it, then upgrade that install. Nothing was restored."
        ) from None
    fsync_file(ready)
    check_filled(ready)
    return ready


def fill_sqlite(ready: Path, database: Path) -> list[tuple[str, str]]:
    """Put the database made ready (`prepare_sqlite`) in place in one rename."""
    named = list(originals_in_sqlite(ready))
    refuse_side_files(database)  # made since the start by a process that opened it
    os.replace(ready, database)
    originals.fsync_dir(database.parent)
    return named


def fill_postgres(result: Restored, dump: Path) -> list[tuple[str, str]]:
    """Fill the empty database from the dump, then hold back its unsent tasks."""
    clear_postgres()  # what an unfinished run of this restore left, if anything
    restore_postgres(dump)
    refuse_newer(MigrationRecorder(connection).applied_migrations(), dump)
    with transaction.atomic(), connection.cursor() as cursor:
        result.held_back = settle(cursor, marker="%s")
    return list(Asset.objects.values_list("sha256", "mime").distinct())


def clear_postgres() -> None:
    """Empty the database's public schema: only ever one this restore found empty."""
    if connection.introspection.table_names():
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA public CASCADE")
            cursor.execute("CREATE SCHEMA public")


def refuse_a_used_target(data_dir: Path, database: Path | None) -> None:
    """Refuse, saying why, a data dir that holds originals or a database with tables."""
    why = used(data_dir, database)
    if why:
        raise BackupError(f"{why}: {NOT_EMPTY}")


def used(data_dir: Path, database: Path | None) -> str:
    """Say what in the data dir is in use ("… already holds originals"), "" if nothing."""
    folder = data_dir / "originals"
    # A temporary file a stopped write left (the store's own, or this restore's) is no
    # original: the same restore must be able to run again over it.
    # Nor is the `lost+found` of a new filesystem mounted there (a review's was refused).
    held = folder.iterdir() if folder.is_dir() else ()
    if any(not leftovers.temporary(p.name) and not leftovers.lost_and_found(p) for p in held):
        return f"{folder} already holds originals"
    try:
        if has_tables(database):
            return f"The database {database or connection.settings_dict['NAME']} already has tables"
    except sqlite3.DatabaseError as exc:
        # Said as what it is: it read as "what it had placed was taken away" (a review).
        return f"The database {database} is not an empty SQLite database ({exc})"
    return ""


def has_tables(database: Path | None) -> bool:
    """Say whether the database (the SQLite file, or PostgreSQL's when None) has tables."""
    if database is None:
        return bool(connection.introspection.table_names())
    if not database.exists() or not database.stat().st_size:
        return False
    with closing(sqlite3.connect(database)) as conn:
        return bool(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])


def restore_original(
    result: Restored, source: Path, target: Path, entry: object, names: set[str]
) -> None:
    """Put one original of the manifest into the data dir, or say why not."""
    sha256, name = entry_of(entry)
    if not is_original_name(sha256, name):
        said = f"not an original's name in the manifest: {name!r}"
        if is_original_name(name[:64], name):  # a name the store gives: the hash disagrees
            said = f"the manifest's sha256 for {name!r} is not the one its name says"
        result.problems.append(said)
        return
    if name in names:
        return  # listed twice: placed once, counted once
    names.add(name)
    try:
        done = result.placer.place(source / name, target / name, sha256)
    except FileNotFoundError:
        result.problems.append(f"missing in the backup: {name}")
        return
    except originals.NotAnOriginal as exc:
        result.problems.append(f"not an original in the backup: {name} ({exc})")
        return
    if not done:
        result.problems.append(f"corrupt in the backup: {name}")
        return
    result.restored += 1


def unrestored(named: Iterable[tuple[str, str]], target: Path, said: list[str]) -> list[str]:
    """Say which originals the restored rows name that are not in place, unless said already.

    Compared by file name (hash and extension): a file under another extension is not the
    original a row names.
    """
    lines = []
    for sha256, mime in sorted(set(named)):
        try:
            name = originals.path_of(sha256, mime).name
        except ValueError:
            lines.append(f"named by the database, not an original's name: {sha256!r}")
            continue
        if not (target / name).is_file() and not any(name in line for line in said):
            lines.append(f"named by the database, not in the backup: {name}")
    return lines


def settle(cursor: Any, *, marker: str) -> int:
    """Make the snapshot's rows true of this install; return how many images were held back.

    Its unsent tasks are held back (`hold_back`), and the lost install's worker is
    forgotten: its last heartbeat would tell the admin, for a while, that a worker runs
    here when none has started yet.
    """
    cursor.execute(f"DELETE FROM {WorkerHeartbeat._meta.db_table}")
    return hold_back(cursor, marker=marker)


def undo(copied: list[Path], named: Iterable[Path], database: Path | None) -> int:
    """Take away what a failed restore placed, so that it can be run again; return how many
    originals the backup names stay in place.

    Only what this run copied from the backup, its bytes read whole there, is taken away:
    the same restore puts it back. What was in place before it ran stays: an earlier run's
    (killed with no undo), or a finished restore's whose database was lost since, which
    may be the only whole copy (a review's second run took away an original whose copy
    in the backup was damaged). The caller then keeps the marker, so that running the
    same restore again finishes it over them.
    """
    for path in copied:
        path.unlink(missing_ok=True)
    kept = sum(1 for path in set(named) if path.is_file() or path.is_symlink())
    connection.close()
    if database is None:
        clear_postgres()
        return kept
    ready = database.with_name(f"{database.name}.restoring")
    for leftover in (ready, *side_files(ready)):
        with contextlib.suppress(IsADirectoryError):  # not this run's: the fault itself
            leftover.unlink(missing_ok=True)
    if database.exists():
        database.write_bytes(b"")  # as a new data dir has it: an empty file
    return kept


def restore_postgres(dump: Path) -> None:
    name = connection.settings_dict["NAME"]
    run_pg(
        "pg_restore",
        "--no-owner",
        "--no-privileges",
        "--exit-on-error",
        "--single-transaction",  # all of it or, failing, nothing
        f"--dbname={name}",
        str(dump),
    )


def pg_restore_howto(src: Path) -> str:
    return (
        "This studio runs on PostgreSQL and pg_restore is not on PATH, so nothing was "
        "restored. Install the PostgreSQL client tools and run this again, or by hand: "
        f"`pg_restore --no-owner --no-privileges --exit-on-error --dbname=NAME "
        f"{src}/{PG_DUMP_FILE}` into an empty database, and copy {src}/originals into "
        f"{originals.originals_dir()}."
    )
