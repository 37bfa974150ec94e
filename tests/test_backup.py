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

from studio import backups, originals, scrub
from studio.models import Asset, Origin
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
def test_it_snapshots_the_database_and_hard_links_the_originals_its_rows_name(tmp_path):
    made = stored(1)
    upload = stored(2, Origin.UPLOADED)
    no_row = originals.save(png_bytes(3))
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

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

    code, out = run("backup", str(dest))

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


@sqlite_only
def test_it_restores_a_backup_into_a_new_data_dir_whose_scrub_is_clean(tmp_path, settings):
    made = stored(1)
    upload = stored(2, Origin.UPLOADED)
    run("backup", str(tmp_path / "backup"))
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()  # as settings leave a new data dir: an empty file

    restored = backups.restore(tmp_path / "backup", data_dir=target, database=database)

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
        backups.restore(tmp_path / "backup", data_dir=target, database=target / "db.sqlite3")

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

    restored = backups.restore(tmp_path / "backup", data_dir=target, database=target / "db")

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
