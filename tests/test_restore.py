"""Restore: `manage.py restore SRC` into a new data dir (docs/operations.md)."""

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest

from studio import backups, originals, restoring, scrub
from studio.models import Origin
from tests.backup_parts import (
    cross_device,
    file_of,
    manifest,
    placed,
    restore_into,
    rows_in,
    run,
    sqlite_only,
    stored,
)
from tests.factories import png_bytes

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


@sqlite_only
def test_it_restores_a_backup_into_a_new_data_dir_whose_scrub_is_clean(tmp_path, settings):
    made = stored(1)
    upload = stored(2, Origin.UPLOADED)
    run("backup", str(tmp_path / "backup"))
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()  # as settings leave a new data dir: an empty file

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 2 and restored.problems == []
    assert rows_in(database) == sorted([(made.sha256, "generated"), (upload.sha256, "uploaded")])
    settings.AVATARS_DATA_DIR = target
    for asset in (made, upload):
        assert originals.read(asset.sha256, asset.mime) == png_bytes(int(asset.file_name[0]))
    result = scrub.check()
    assert result.passed and result.findings == []


def test_it_refuses_to_restore_over_a_database_that_has_tables(tmp_path, settings):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    settings.AVATARS_DATA_DIR = tmp_path / "new"

    # The test database is this studio's: it has every table.
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert "already has tables: restore into a new data dir with an empty database." in out
    assert not (tmp_path / "new" / "originals").exists()


@sqlite_only
def test_it_refuses_to_restore_into_a_data_dir_that_holds_originals(tmp_path):
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    target = tmp_path / "restored"
    (target / "originals").mkdir(parents=True)
    (target / "originals" / file_of(asset).name).write_bytes(b"someone else's")

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=target / "db.sqlite3")

    assert str(refused.value) == (
        f"{target / 'originals'} already holds originals: "
        "restore into a new data dir with an empty database."
    )
    assert not (target / "db.sqlite3").exists()


def test_it_refuses_a_folder_without_a_manifest(tmp_path):
    (tmp_path / "half").mkdir()

    code, out = run("restore", str(tmp_path / "half"))

    assert code == 1
    assert "has no manifest.json: it is not a finished backup" in out


def test_it_says_a_backup_folder_that_is_not_there_is_not_there(tmp_path):
    """Found by a review: a mistyped folder was said to be "not a finished backup"."""
    code, out = run("restore", str(tmp_path / "nothere"))

    assert code == 1
    assert f"There is no folder {tmp_path / 'nothere'}: name the backup's folder." in out


@sqlite_only
def test_it_reports_an_original_that_fails_its_hash_in_the_backup(tmp_path, monkeypatch):
    asset = stored(1)
    monkeypatch.setattr(os, "link", cross_device)
    run("backup", str(tmp_path / "backup"))
    (tmp_path / "backup" / "originals" / file_of(asset).name).write_bytes(png_bytes(9))
    target = tmp_path / "restored"

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=target / "db")

    assert restored.problems == [f"corrupt in the backup: {file_of(asset).name}"]
    assert not (target / "originals" / file_of(asset).name).exists()


# --- a damaged backup is refused before anything is placed (found by a review) ---------


def damage_database(snapshot: Path, how: str) -> None:
    if how == "missing":
        snapshot.unlink()
    elif how == "cut short":
        data = snapshot.read_bytes()
        snapshot.write_bytes(data[: len(data) - 8192])
    elif how == "replaced":
        snapshot.write_bytes(b"\0" * snapshot.stat().st_size)


@sqlite_only
@pytest.mark.parametrize("how", ["missing", "cut short", "replaced"])
def test_it_refuses_a_backup_whose_database_is_damaged_and_places_nothing(tmp_path, how):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    snapshot = tmp_path / "backup" / "db.sqlite3"
    damage_database(snapshot, how)
    target, database = restore_into(tmp_path)
    before = sorted(os.listdir(tmp_path / "backup"))

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert "Nothing was restored" in str(refused.value) or "is missing" in str(refused.value)
    assert placed(target) == []
    assert database.stat().st_size == 0
    assert sorted(os.listdir(tmp_path / "backup")) == before  # the backup was not written


@sqlite_only
def test_it_refuses_an_unreadable_database_a_manifest_did_not_record(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    del listed["database_sha256"], listed["database_size"]
    listed["format"] = 1  # as an older backup's: it recorded neither
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    (tmp_path / "backup" / "db.sqlite3").write_bytes(b"not a database at all" * 100)
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert "is not a readable SQLite database" in str(refused.value)
    assert placed(target) == []


@sqlite_only
def test_it_says_which_originals_the_database_names_but_the_manifest_lost(tmp_path):
    kept, lost = stored(1), stored(2)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    listed["originals"] = [o for o in listed["originals"] if o["sha256"] == kept.sha256]
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 1
    assert restored.problems == [f"named by the database, not in the backup: {file_of(lost).name}"]


@sqlite_only
def test_a_restore_that_fails_midway_takes_back_what_it_placed_and_can_run_again(
    tmp_path, monkeypatch
):
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    fill = restoring.copy_sqlite

    def the_disk_fills_up(source: Path, target_file: Path, **_kwargs: object) -> None:
        target_file.write_bytes(b"half a database")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(restoring, "copy_sqlite", the_disk_fills_up)
    with pytest.raises(OSError):
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert placed(target) == []
    assert database.stat().st_size == 0

    monkeypatch.setattr(restoring, "copy_sqlite", fill)
    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert restored.problems == [] and placed(target) == [file_of(asset).name]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.pop("database_sha256"), "records no sha256 and size for its database"),
        (lambda m: m.update(database_size="123"), "records no sha256 and size for its database"),
        (lambda m: m.pop("database"), "names no database kind"),
        (lambda m: m.update(originals={}), "lists no originals"),
    ],
    ids=["no sha256", "a size that is text", "no database kind", "originals not a list"],
)
def test_it_refuses_a_manifest_whose_shape_it_cannot_trust(tmp_path, edit, said):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    edit(listed)
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert said in str(refused.value)
    assert placed(target) == []


@sqlite_only
@pytest.mark.parametrize("odd", ["a folder", "a pipe", "past the cap"])
def test_it_reads_nothing_but_a_regular_file_of_at_most_the_cap_from_a_backup(
    tmp_path, settings, odd
):
    """Found by a review: a folder gave a traceback, a pipe hung, a 3 GB file was read whole."""
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    copy = tmp_path / "backup" / "originals" / file_of(asset).name
    copy.unlink()
    if odd == "a folder":
        copy.mkdir()
    elif odd == "a pipe":
        os.mkfifo(copy)
    else:
        settings.AVATARS_MAX_IMAGE_BYTES = 100
        copy.write_bytes(file_of(asset).read_bytes())
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.problems[0].startswith(f"not an original in the backup: {copy.name} (")
    assert placed(target) == []


@sqlite_only
def test_it_places_and_counts_an_original_listed_twice_once(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    listed["originals"] *= 2
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert (restored.restored, restored.problems) == (1, [])


@sqlite_only
def test_the_database_appears_only_with_its_unsent_tasks_held_back(tmp_path, monkeypatch, subject):
    """Found by a review: a restore that failed (or was killed) between filling the database
    and holding back left queued images that the worker then paid for again."""
    from tests.factories import plan

    plan(subject, candidates=2)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    hold_back = restoring.hold_back

    def fails(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(restoring, "hold_back", fails)
    with pytest.raises(sqlite3.OperationalError):
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert database.stat().st_size == 0  # never a database whose tasks were not held back
    assert not (target / restoring.MARKER).exists()

    monkeypatch.setattr(restoring, "hold_back", hold_back)
    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert restored.held_back == 2


@sqlite_only
def test_a_restore_killed_before_it_finished_keeps_the_worker_off_until_run_again(
    tmp_path, settings
):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    # As a kill just before the end leaves it: everything in place, the marker still there.
    marker = target / restoring.MARKER
    marker.write_text(f"restoring {tmp_path / 'backup'}\n")

    with pytest.raises(restoring.RestoreUnfinished) as refused:
        restoring.unfinished(target)
    assert "run the same `manage.py restore` again" in str(refused.value)
    settings.AVATARS_DATA_DIR = target
    code, out = run("run_worker", "--once")
    assert code == 1 and "has not finished" in out
    assert "running" not in out, out  # it never said it ran

    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert (again.restored, again.problems) == (1, [])
    assert not marker.exists()
    other = tmp_path / "other"
    marker.write_text(f"restoring {other}\n")
    with pytest.raises(backups.BackupError) as elsewhere:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert "Another restore into this data dir has not finished" in str(elsewhere.value)


@sqlite_only
def test_a_restore_killed_while_it_left_its_marker_can_be_run_again(tmp_path, monkeypatch):
    """Found by a review: killed between making the marker and writing it, a restore left
    it empty, and every later run was told to run "that one" again."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    marker = target / restoring.MARKER
    target.mkdir(parents=True, exist_ok=True)
    marker.write_text("")  # as the marker was left by a kill mid-write, before this fix

    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert (again.restored, again.problems) == (1, [])
    assert not marker.exists()


@sqlite_only
def test_the_marker_is_there_whole_or_not_at_all(tmp_path, monkeypatch):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    real_replace = os.replace

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # a kill just before the marker's name is given

    monkeypatch.setattr(restoring.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert not (target / restoring.MARKER).exists()

    monkeypatch.setattr(restoring.os, "replace", real_replace)
    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert (again.restored, again.problems) == (1, [])
    assert list(target.glob(f"{restoring.MARKER}*")) == []  # nothing left aside either


def test_a_restore_the_disk_stops_says_so_in_a_sentence(tmp_path, monkeypatch):
    def the_disk_fills_up(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/originals/x.png")

    monkeypatch.setattr(restoring, "restore", the_disk_fills_up)
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert (
        "The restore stopped: No space left on device: /data/originals/x.png. What it had "
        "placed was taken away and the database left empty: deal with the cause and run it "
        "again." in out
    )
