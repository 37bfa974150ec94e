"""Backup and restore: `manage.py backup DEST` and `manage.py restore SRC` (docs/operations.md)."""

import errno
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio import backups, originals, restoring, scrub
from studio.models import Asset, Attempt, Origin, TaskState
from tests.factories import png_bytes
from tests.processes import server_url

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)
# These open the SQLite files themselves; PostgreSQL's round trip is in test_backup_e2e.
sqlite_only = pytest.mark.skipif(bool(server_url()), reason="SQLite's files")
postgres_only = pytest.mark.skipif(
    not server_url(), reason="PostgreSQL only: runs in `make test-postgres`"
)


def run(command: str, *args: str) -> tuple[int, str]:
    """Run a command; return its exit code and everything it printed."""
    out = io.StringIO()
    try:
        call_command(command, *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}\n"
    return 0, out.getvalue()


def stored(seed: int, origin: str = Origin.GENERATED) -> Asset:
    original = originals.save(png_bytes(seed))
    return Asset.objects.create_stored(
        original, file_name=f"{seed}.png", origin=origin, ember_image_id=f"img_{seed}"
    )


def file_of(asset: Asset) -> Path:
    return originals.path_for(asset.sha256, originals.extension_for(asset.mime))


def rows_in(database: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(database) as conn:
        return sorted(conn.execute("SELECT sha256, origin FROM studio_asset").fetchall())


def cross_device(src: Path, dst: Path) -> None:
    """Stand in for os.link when DEST is on another filesystem."""
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def manifest(dest: Path) -> dict:
    return json.loads((dest / "manifest.json").read_text())


@sqlite_only
def test_it_copies_the_originals_so_damage_in_place_stays_out_of_the_backup(tmp_path):
    """Found by a review: hard links by default shared every file with the live store."""
    asset = stored(1)
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    copy = dest / "originals" / file_of(asset).name
    assert code == 0, out
    assert not copy.samefile(file_of(asset))
    assert "1 original: 0 hard-linked, 1 copied" in out
    with file_of(asset).open("r+b") as live:  # a write into the live file, in place
        live.write(b"XXXX")
    assert originals.file_sha256(copy) == asset.sha256


@sqlite_only
def test_it_snapshots_the_database_and_hard_links_the_originals_when_asked(tmp_path):
    made = stored(1)
    upload = stored(2, Origin.UPLOADED)
    no_row = originals.save(png_bytes(3))
    dest = tmp_path / "backup"

    code, out = run("backup", "--link", str(dest))

    assert code == 0, out
    assert rows_in(dest / "db.sqlite3") == sorted(
        [(made.sha256, "generated"), (upload.sha256, "uploaded")]
    )
    backed_up = sorted(p.name for p in (dest / "originals").iterdir())
    assert backed_up == sorted([file_of(made).name, file_of(upload).name])
    assert not (dest / "originals" / no_row.path.name).exists()
    for asset in (made, upload):
        assert (dest / "originals" / file_of(asset).name).samefile(file_of(asset))
    listed = manifest(dest)
    assert listed["database"] == "sqlite"
    assert listed["created_at"]
    assert sorted(listed["originals"], key=lambda o: o["sha256"]) == sorted(
        [{"file": file_of(a).name, "sha256": a.sha256, "size": a.size} for a in (made, upload)],
        key=lambda o: o["sha256"],
    )
    assert "2 originals: 2 hard-linked, 0 copied" in out


def test_it_copies_and_fsyncs_the_originals_when_links_cross_filesystems(tmp_path, monkeypatch):
    asset = stored(1)
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "link", cross_device)
    monkeypatch.setattr(os, "fsync", fsync)
    dest = tmp_path / "backup"

    code, out = run("backup", "--link", str(dest))

    assert code == 0, out
    copy = dest / "originals" / file_of(asset).name
    assert copy.read_bytes() == file_of(asset).read_bytes()
    assert not copy.samefile(file_of(asset))
    assert len(synced) >= 3  # the database, the copy, and the folders that hold them
    assert "1 original: 0 hard-linked, 1 copied" in out


def test_it_says_which_original_the_snapshot_names_but_the_data_dir_lacks(tmp_path):
    kept = stored(1)
    lost = stored(2)
    file_of(lost).unlink()
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 1
    assert f"missing in the data dir: {file_of(lost).name}" in out
    assert [o["sha256"] for o in manifest(dest)["originals"]] == [kept.sha256]
    assert manifest(dest)["missing"] == [file_of(lost).name]


def test_it_refuses_to_back_up_into_a_folder_that_holds_anything(tmp_path):
    stored(1)
    dest = tmp_path / "backup"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")

    code, out = run("backup", str(dest))

    assert code == 1
    assert f"{dest} is not empty: back up into a new folder." in out
    assert sorted(os.listdir(dest)) == ["notes.txt"]


def test_it_refuses_to_back_up_into_the_originals_store_itself():
    stored(1)
    dest = originals.originals_dir() / "backup"

    code, out = run("backup", str(dest))

    assert code == 1
    assert "is inside the originals store" in out
    assert not dest.exists()


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


@sqlite_only
def test_it_backs_up_only_what_the_snapshot_names_while_the_worker_writes(tmp_path, monkeypatch):
    before = stored(1)
    snapshot = backups.copy_sqlite

    def the_worker_stores_a_result_right_after(source: Path, target: Path) -> None:
        snapshot(source, target)
        stored(2)  # its file and row both land after the snapshot

    monkeypatch.setattr(backups, "copy_sqlite", the_worker_stores_a_result_right_after)
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 0, out
    assert rows_in(dest / "db.sqlite3") == [(before.sha256, "generated")]
    assert [o["sha256"] for o in manifest(dest)["originals"]] == [before.sha256]
    assert Asset.objects.count() == 2


@postgres_only
def test_it_says_how_to_use_pg_dump_when_it_is_not_installed(tmp_path, monkeypatch):
    stored(1)
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 1
    assert "pg_dump is not on PATH, so nothing was backed up." in out
    assert f"`pg_dump --format=custom --file={dest}/db.pgdump`" in out
    assert not dest.exists()


# --- a damaged backup is refused before anything is placed (found by a review) ---------


def restore_into(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()
    return target, database


def placed(target: Path) -> list[str]:
    folder = target / "originals"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


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
    del listed["database_sha256"], listed["database_size"]  # as an older backup's
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
    assert restored.problems == [f"named by the database, not in the backup: {lost.sha256}"]


@sqlite_only
def test_a_restore_that_fails_midway_takes_back_what_it_placed_and_can_run_again(
    tmp_path, monkeypatch
):
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    fill = restoring.copy_sqlite

    def the_disk_fills_up(source: Path, target_file: Path) -> None:
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


# --- tasks waiting to be sent are held back (found by a review: they were paid twice) -----


@sqlite_only
def test_it_holds_back_the_images_the_backup_holds_as_waiting_to_be_sent(tmp_path, subject):
    from tests.factories import plan

    queued, preparing, running = plan(subject, candidates=3)
    [clip] = plan(subject, frames=("clip",))
    Attempt.objects.create(
        task=running, number=1, ember_job_id="job_1", submitted_at=running.created_at,
        outcome=Attempt.Outcome.ACCEPTED,
    )  # fmt: skip
    type(queued).objects.filter(pk=preparing.pk).update(
        state=TaskState.PREPARING, next_attempt_at=None
    )
    type(queued).objects.filter(pk=running.pk).update(
        state=TaskState.RUNNING, ember_job_id="job_1", submitted_at=running.created_at
    )
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    code, out = run_restore(tmp_path / "backup", target, database)

    with sqlite3.connect(database) as conn:
        states = dict(conn.execute("SELECT id, state FROM studio_task").fetchall())
        attempts = conn.execute(
            "SELECT task_id, number, outcome FROM studio_attempt ORDER BY task_id"
        ).fetchall()
    hexed = {t: str(t.pk).replace("-", "") for t in (queued, preparing, running, clip)}
    assert states[hexed[queued]] == states[hexed[preparing]] == "uncertain"
    assert states[hexed[running]] == "running"
    assert states[hexed[clip]] == "queued"  # a re-send under its key costs nothing
    assert sorted(attempts) == sorted(
        [(hexed[queued], 1, "unknown"), (hexed[preparing], 1, "unknown"),
         (hexed[running], 1, "accepted")]
    )  # fmt: skip
    assert code == 0, out
    assert "Held back 2 image task(s)" in out


def run_restore(src: Path, target: Path, database: Path) -> tuple[int, str]:
    """Restore as the command says it (its output), into `database` rather than the test's."""
    out = io.StringIO()
    restored = restoring.restore(src, data_dir=target, database=database)
    command = __import__("studio.management.commands.restore", fromlist=["Command"]).Command
    real = restoring.restore
    try:
        restoring.restore = lambda *args, **kwargs: restored  # type: ignore[assignment]
        call_command(command(), str(src), stdout=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}"
    finally:
        restoring.restore = real  # type: ignore[assignment]
    return 0, out.getvalue()
