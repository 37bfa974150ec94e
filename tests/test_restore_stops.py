"""Restore under a review's adversity: stops between steps, a disk that refuses the last
step, and backups that carry more than the manifest vouches for (docs/operations.md)."""

import errno
import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from studio import backups, originals, restore_checks, restoring
from tests.backup_parts import (
    manifest,
    placed,
    restore_into,
    sqlite_only,
    stop_once_an_original_is_placed,
)

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = [pytest.mark.django_db(transaction=True), sqlite_only]


def tables(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]


def record(backup: Path, **changes: object) -> None:
    """Write the backup's manifest again with `changes`, as a forger would."""
    listed = manifest(backup)
    listed.update(changes)
    (backup / "manifest.json").write_text(json.dumps(listed))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_stop_just_after_an_original_is_placed_takes_that_one_away_too(
    backup, tmp_path, monkeypatch
):
    """Found by a review: a Ctrl-C between the rename that placed an original and the
    line that noted it left that file behind, and the same restore was then refused
    ("already holds originals")."""
    target, database = restore_into(tmp_path)
    stop_once_an_original_is_placed(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        restoring.restore(backup, data_dir=target, database=database)

    assert placed(target) == []
    assert database.stat().st_size == 0
    assert not (target / restoring.MARKER).exists()
    monkeypatch.undo()
    again = restoring.restore(backup, data_dir=target, database=database)
    assert (again.restored, again.problems) == (2, [])


def test_a_disk_that_refuses_the_last_step_leaves_everything_and_says_so(
    backup, tmp_path, monkeypatch
):
    """Found by a review: a full disk as `RESTORED` was written was reported as "What it
    had placed was taken away", with everything still in place."""
    target, database = restore_into(tmp_path)
    real = originals.write_atomically

    def full_at_the_end(path: Path, data: bytes) -> None:
        if path.name == restoring.DONE:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(originals, "write_atomically", full_at_the_end)
    with pytest.raises(backups.BackupError) as stopped:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(stopped.value) == (
        f"The restore stopped in its last step: No space left on device: {target / 'RESTORED'}. "
        f"Everything it restored is in place, and {restoring.MARKER} keeps this install from "
        "starting until the same restore, run again, finishes it."
    )
    assert len(placed(target)) == 2 and tables(database) > 0
    assert (target / restoring.MARKER).exists()
    monkeypatch.setattr(originals, "write_atomically", real)
    again = restoring.restore(backup, data_dir=target, database=database)
    assert (again.restored, again.problems) == (2, [])
    assert not (target / restoring.MARKER).exists()


def test_a_write_ahead_log_beside_the_snapshot_is_neither_played_nor_written(backup, tmp_path):
    """Found by a review: a `-wal` file beside a WAL-mode snapshot (its hash recorded) was
    played into the restored rows, and into the backup's own file."""
    snapshot = backup / "db.sqlite3"
    with sqlite3.connect(snapshot) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    vouched = tmp_path / "vouched.sqlite3"
    shutil.copyfile(snapshot, vouched)
    conn = sqlite3.connect(snapshot)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("UPDATE studio_asset SET file_name = 'INJECTED'")
    conn.commit()
    shutil.copyfile(backup / "db.sqlite3-wal", tmp_path / "carried-wal")
    conn.close()
    shutil.copyfile(vouched, snapshot)
    shutil.copyfile(tmp_path / "carried-wal", backup / "db.sqlite3-wal")
    record(backup, database_sha256=sha256_of(snapshot), database_size=snapshot.stat().st_size)
    target, database = restore_into(tmp_path)

    restored = restoring.restore(backup, data_dir=target, database=database)

    assert restored.problems == []
    with sqlite3.connect(database) as conn:
        names = sorted(name for (name,) in conn.execute("SELECT file_name FROM studio_asset"))
    assert names == ["1.png", "2.png"]
    assert sha256_of(snapshot) == sha256_of(vouched)
    assert sha256_of(backup / "db.sqlite3-wal") == sha256_of(tmp_path / "carried-wal")


@pytest.mark.parametrize("odd", ["a pipe", "a link to /dev/zero", "past the cap"])
def test_a_manifest_that_is_no_regular_file_of_a_manifests_size_is_not_read(
    backup, tmp_path, monkeypatch, odd
):
    """Found by a review: a pipe hung a restore for good, and /dev/zero ran it out of
    memory."""
    path = backup / "manifest.json"
    if odd == "a pipe":
        path.unlink()
        os.mkfifo(path)
        said = "is not a regular file"
    elif odd == "a link to /dev/zero":
        path.unlink()
        path.symlink_to("/dev/zero")
        said = "is not a regular file"
    else:
        monkeypatch.setattr(restore_checks, "MANIFEST_MAX", path.stat().st_size - 1)
        said = "more than a manifest this version writes"
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert said in str(refused.value) and "Nothing was restored." in str(refused.value)
    assert placed(target) == [] and not (target / restoring.MARKER).exists()


def test_an_original_that_is_a_link_out_of_the_backup_is_not_read(backup, tmp_path):
    """Found by a review: links to files outside the backup were read (one to
    /proc/self/environ), and placed when they matched."""
    first = backup / "originals" / sorted(p.name for p in (backup / "originals").iterdir())[0]
    outside = tmp_path / "outside.png"
    outside.write_bytes(first.read_bytes())
    first.unlink()
    first.symlink_to(outside)
    target, database = restore_into(tmp_path)

    restored = restoring.restore(backup, data_dir=target, database=database)

    assert restored.problems[0] == (
        f"not an original in the backup: {first.name} (not a regular file)"
    )
    assert first.name not in placed(target) and len(placed(target)) == 1


def test_an_originals_folder_that_is_a_link_elsewhere_is_refused(backup, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (backup / "originals").rename(elsewhere)
    (backup / "originals").symlink_to(elsewhere)
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(refused.value) == (
        f"{backup / 'originals'} is a symbolic link, not the backup's own folder: a backup "
        "holds its originals itself. Nothing was restored."
    )
    assert placed(target) == []


def test_a_snapshot_this_version_cannot_fill_is_refused_before_any_original_is_placed(
    backup, tmp_path, monkeypatch
):
    """Found by a review: the originals were copied, then taken away with the advice to
    run the same restore again, which could never help."""
    snapshot = backup / "db.sqlite3"
    with sqlite3.connect(snapshot) as conn:
        conn.execute("ALTER TABLE studio_task DROP COLUMN phase")
        conn.execute("VACUUM")
    record(backup, database_sha256=sha256_of(snapshot), database_size=snapshot.stat().st_size)
    target, database = restore_into(tmp_path)
    written: list[str] = []
    real = originals.write_atomically

    def noted(path: Path, data: bytes) -> None:
        written.append(path.name)
        real(path, data)

    monkeypatch.setattr(originals, "write_atomically", noted)
    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(refused.value).startswith(
        f"{snapshot} holds tables this version of Avatars cannot restore into (no such column"
    )
    assert str(refused.value).endswith("Nothing was restored.")
    assert written == []  # no original was placed, even for a moment
    assert placed(target) == [] and database.stat().st_size == 0


def test_a_snapshot_of_a_newer_version_is_refused_before_any_original_is_placed(backup, tmp_path):
    """Found by a review: a backup whose database a newer version had migrated restored
    with exit 0, `migrate` had nothing to do, and every new batch then failed with a 500
    (a column this version does not fill)."""
    snapshot = backup / "db.sqlite3"
    with sqlite3.connect(snapshot) as conn:
        conn.execute("ALTER TABLE studio_task ADD COLUMN priority integer NOT NULL DEFAULT 0")
        conn.execute(
            "INSERT INTO django_migrations (app, name, applied) "
            "VALUES ('studio', '0099_task_priority', '2027-01-01 00:00:00')"
        )
    record(backup, database_sha256=sha256_of(snapshot), database_size=snapshot.stat().st_size)
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(refused.value) == (
        f"{snapshot} was made by a newer version of Avatars: its database has migrations "
        "this version does not have (studio.0099_task_priority). Restore it with that "
        "version or a later one. Nothing was restored."
    )
    assert placed(target) == [] and database.stat().st_size == 0
    assert not (target / restoring.MARKER).exists()


def test_a_manifest_hash_that_disagrees_with_its_file_name_is_said_so(backup, tmp_path):
    """Found by a review: a manifest entry whose sha256 was changed was reported as "not an
    original's name in the manifest", though the name was right and the hash was wrong."""
    listed = manifest(backup)
    entry = listed["originals"][0]
    entry["sha256"] = "0" * 64
    record(backup, originals=listed["originals"])
    target, database = restore_into(tmp_path)

    restored = restoring.restore(backup, data_dir=target, database=database)

    assert restored.problems[0] == (
        f"the manifest's sha256 for {entry['file']!r} is not the one its name says"
    ), restored.problems


def test_a_finished_restore_whose_rows_and_files_are_gone_since_is_run_again(backup, tmp_path):
    """Found by a review: with the database and the originals removed, the same restore
    said it had finished and changed nothing, and its advice (migrate) made an empty
    install."""
    target, database = restore_into(tmp_path)
    restoring.restore(backup, data_dir=target, database=database)
    shutil.rmtree(target / "originals")
    database.write_bytes(b"")

    again = restoring.restore(backup, data_dir=target, database=database)

    assert (again.restored, again.problems) == (2, [])
    assert tables(database) > 0
    with pytest.raises(restoring.AlreadyRestored):
        restoring.restore(backup, data_dir=target, database=database)


def test_a_run_after_a_killed_one_keeps_its_originals_and_marker_if_it_fails(
    backup, tmp_path, monkeypatch
):
    """Found by a review: a run killed with no chance to undo (SIGKILL) left originals and
    its marker; the next run failed early, took away only its own and the marker, and the
    same restore was then refused ("already holds originals"). What it did not copy itself
    now stays, with the marker: the same restore, run again, finishes over it."""
    target, database = restore_into(tmp_path)
    (target / "originals").mkdir()
    first = sorted((backup / "originals").iterdir())[0]
    shutil.copyfile(first, target / "originals" / first.name)  # what the killed run placed
    (target / restoring.MARKER).write_text(f"restoring {backup}\n")

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(restoring, "copy_sqlite", full)
    with pytest.raises(restoring.Stopped) as stopped:
        restoring.restore(backup, data_dir=target, database=database)

    assert "1 more files under the names of the backup's originals were in place" in str(
        stopped.value
    )
    assert placed(target) == [first.name] and (target / restoring.MARKER).exists()
    monkeypatch.undo()
    again = restoring.restore(backup, data_dir=target, database=database)
    assert (again.restored, again.problems) == (2, [])
    assert not (target / restoring.MARKER).exists()


def test_a_finished_restore_whose_database_alone_is_gone_is_run_again(backup, tmp_path):
    """Found by a review: told "nothing was changed", an install whose database was removed
    (its originals kept) came up empty after `migrate`."""
    target, database = restore_into(tmp_path)
    restoring.restore(backup, data_dir=target, database=database)
    database.write_bytes(b"")

    again = restoring.restore(backup, data_dir=target, database=database)

    assert (again.restored, again.problems) == (2, [])
    assert tables(database) > 0


def test_a_last_flush_that_fails_after_the_marker_is_gone_says_the_restore_finished(
    backup, tmp_path, monkeypatch
):
    """Found by a review: it said the marker kept the install from starting; there was none."""
    target, database = restore_into(tmp_path)
    real = originals.fsync_dir

    def failing_at_the_end(folder: Path) -> None:
        if folder == target and not (target / restoring.MARKER).exists():
            raise OSError(errno.EIO, "Input/output error", str(folder))
        real(folder)

    monkeypatch.setattr(originals, "fsync_dir", failing_at_the_end)
    with pytest.raises(backups.BackupError) as stopped:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(stopped.value) == (
        f"The restore finished, but its last write may not be on the disk: Input/output error: "
        f"{target}. Everything it restored is in place: check the disk."
    )
    assert len(placed(target)) == 2 and tables(database) > 0


def test_a_target_database_that_is_not_sqlite_is_refused_as_such(backup, tmp_path):
    """Found by a review: "What it had placed was taken away", where nothing was placed and
    the file was left as it was."""
    target, database = restore_into(tmp_path)
    database.write_bytes(b"not a database, " * 512)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(refused.value) == (
        f"The database {database} is not an empty SQLite database (file is not a database): "
        "restore into a new data dir with an empty database."
    )
    assert database.read_bytes() == b"not a database, " * 512
