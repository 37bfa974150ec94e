"""Backup: `manage.py backup DEST` (docs/operations.md)."""

import errno
import os
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from studio import backups, originals
from studio.management.commands.backup import Command as BackupCommand
from studio.models import Asset, Origin
from tests.backup_parts import (
    cross_device,
    file_of,
    manifest,
    postgres_only,
    rows_in,
    run,
    sqlite_only,
    stored,
)
from tests.factories import png_bytes

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


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


def test_it_copies_the_bytes_of_an_original_that_is_a_symbolic_link_even_with_link(tmp_path):
    """Found by a review: a hard link to a symbolic link is the link again, not the bytes."""
    asset = stored(1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    file_of(asset).rename(elsewhere / file_of(asset).name)
    file_of(asset).symlink_to(elsewhere / file_of(asset).name)
    dest = tmp_path / "backup"

    code, out = run("backup", "--link", str(dest))

    assert code == 0, out
    assert "1 original: 0 hard-linked, 1 copied" in out
    shutil.rmtree(elsewhere)  # the bytes the live link pointed to are gone
    copy = dest / "originals" / file_of(asset).name
    assert not copy.is_symlink()
    assert copy.read_bytes() == png_bytes(1)


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


def test_it_says_a_file_in_the_backups_place_is_not_a_folder(tmp_path):
    """Found by a review: an empty file there was said to be "not empty"."""
    stored(1)
    dest = tmp_path / "backup"
    dest.write_bytes(b"")

    code, out = run("backup", str(dest))

    assert code == 1
    assert f"{dest} is not a folder: back up into a new folder." in out
    assert dest.read_bytes() == b""


def test_it_refuses_to_back_up_into_the_originals_store_itself():
    stored(1)
    dest = originals.originals_dir() / "backup"

    code, out = run("backup", str(dest))

    assert code == 1
    assert "is inside the originals store" in out
    assert not dest.exists()


@sqlite_only
def test_its_snapshot_holds_the_rows_before_it_while_the_worker_writes(tmp_path, monkeypatch):
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
    late = Asset.objects.exclude(pk=before.pk).get()
    # The result stored after the snapshot is in it too, for its task's copy to finish.
    assert [o["sha256"] for o in manifest(dest)["originals"]] == [before.sha256, late.sha256]


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


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/backups/db.sqlite3"),
            "No space left on device: /backups/db.sqlite3",
        ),
        (sqlite3.OperationalError("database or disk is full"), "database or disk is full"),
    ],
)
def test_a_backup_the_disk_stops_says_so_in_a_sentence(tmp_path, monkeypatch, failure, said):
    """Found by a review: a full disk ended the backup in a traceback, and the half-written
    folder was then refused as "not empty" with no word of why."""
    stored(1)

    def the_disk_fills_up(*_args: object) -> None:
        raise failure

    monkeypatch.setattr(backups, "copy_sqlite", the_disk_fills_up)
    monkeypatch.setattr(backups, "dump_postgres", the_disk_fills_up)
    code, out = run("backup", str(tmp_path / "backup"))

    assert code == 1
    assert f"The backup stopped: {said}. What it wrote in {tmp_path / 'backup'} is not a" in out
    assert "remove that folder" in out
    assert "Traceback" not in out


def test_a_disk_that_fills_as_an_original_is_written_is_named_with_the_file(tmp_path, monkeypatch):
    """Found by the operators' review: `The backup stopped: No space left on device.`, with
    no word of which file or disk (a write's error carries no file name)."""
    asset = stored(1)
    real_fdopen = os.fdopen
    dest = tmp_path / "backup"

    class Full:
        def __init__(self, fd: int) -> None:
            self.file = real_fdopen(fd, "wb")

        def __enter__(self) -> "Full":
            return self

        def __exit__(self, *_exc: object) -> None:
            self.file.close()

        def write(self, _data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd: int, *args: object, **kwargs: object):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(dest / "originals")):
            return Full(fd)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    code, out = run("backup", str(dest))

    assert code == 1
    original = dest / "originals" / file_of(asset).name
    assert f"The backup stopped: No space left on device: {original}. " in out, out


def test_a_backup_into_a_folder_that_cannot_be_made_says_so(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")

    code, out = run("backup", str(tmp_path / "a-file" / "backup"))

    assert code == 1
    assert "The backup stopped: Not a directory" in out, out


@pytest.mark.parametrize("inside", ["backup", "thumbs", "thumbs/backup"])
def test_it_refuses_to_back_up_into_the_data_dir(inside):
    """Found by a review: a backup into data/thumbs (the thumbnail cache, which an operator
    may clear) was written, and the studio then cached thumbnails beside it."""
    stored(1)
    dest = Path(settings.AVATARS_DATA_DIR) / inside

    code, out = run("backup", str(dest))

    assert code == 1
    assert f"{dest} is inside the data dir" in out, out
    assert not (dest / "manifest.json").exists()


def test_a_backup_that_could_not_make_its_folder_says_nothing_was_written(tmp_path):
    """Found by a review: it said to remove a folder that what it wrote was in; none was."""
    stored(1)
    (tmp_path / "file").write_text("")
    dest = tmp_path / "file" / "backup"  # under a file: the folder cannot be made

    code, out = run("backup", str(dest))

    assert code == 1
    assert f"Nothing was written ({dest} was not made)" in out, out


def test_a_backup_stopped_once_its_manifest_is_written_says_it_is_whole(tmp_path, monkeypatch):
    """Found by the operators' review: a SIGTERM in the moment after the manifest was
    written ended the command saying what it wrote "is not a backup (it has no
    manifest)", or, once its handler was gone, with 143 and no sentence at all."""
    stored(1)
    fsync_dir = originals.fsync_dir
    stopped: list[Path] = []

    def stopped_after_the_manifest(path: Path) -> None:
        if (path / backups.MANIFEST).exists() and not stopped:
            stopped.append(path)
            raise backups.Terminated()  # as the SIGTERM handler raises it
        fsync_dir(path)

    monkeypatch.setattr(originals, "fsync_dir", stopped_after_the_manifest)
    dest = tmp_path / "backup"
    code, out = run("backup", str(dest))

    assert stopped == [dest]
    assert code == 0, out
    assert f"The backup in {dest} is whole: it was stopped (SIGTERM) only after its " in out
    assert "not a backup" not in out
    assert manifest(dest)["originals"], "the manifest names the original"


def test_it_keeps_the_originals_the_worker_stored_while_it_ran(tmp_path, monkeypatch):
    """Found by a backup review: a result the worker stored (and Ember then released and
    removed) after the snapshot was left out; restored, its task found it nowhere."""
    before = stored(1)
    upload_during = []
    back_up_original = backups.back_up_original

    def worker_stores_a_result_meanwhile(*args) -> None:
        if not upload_during:  # as the snapshot's originals are copied
            stored(2)  # its file, then its row: the worker's order
            upload_during.append(stored(3, Origin.UPLOADED))
        back_up_original(*args)

    monkeypatch.setattr(backups, "back_up_original", worker_stores_a_result_meanwhile)
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 0, out
    late = Asset.objects.get(ember_image_id="img_2")
    backed_up = {entry["file"] for entry in manifest(dest)["originals"]}
    assert file_of(late).name in backed_up, out
    assert originals.file_sha256(dest / "originals" / file_of(late).name) == late.sha256
    assert file_of(before).name in backed_up
    assert file_of(upload_during[0]).name not in backed_up  # no task of the snapshot needs it
    assert "1 original stored while the backup ran is in it too" in out, out


def test_a_ctrl_c_while_a_whole_backup_is_reported_says_it_is_whole(tmp_path, monkeypatch):
    """Found by the operators' review: a Ctrl-C as the last lines were said ended the
    command with 130, though the backup in DEST was whole."""
    stored(1)

    def interrupted(*_args: object) -> str:
        raise KeyboardInterrupt  # as Python raises it for a Ctrl-C between two lines

    monkeypatch.setattr(backups.Placer, "counts", interrupted)
    dest = tmp_path / "backup"
    code, out = run("backup", str(dest))

    assert code == 0, out
    assert f"The backup in {dest} is whole: it was interrupted (Ctrl-C) only after its " in out


def test_a_backup_stopped_after_its_manifest_still_says_what_it_lacks(tmp_path, monkeypatch):
    """Found by a backup review: stopped in that moment, a backup whose rows name a missing
    original would say it is whole and exit 0, keeping the missing original quiet."""
    file_of(stored(1)).unlink()
    fsync_dir = originals.fsync_dir
    stopped: list[Path] = []

    def stopped_after_the_manifest(path: Path) -> None:
        if (path / backups.MANIFEST).exists() and not stopped:
            stopped.append(path)
            raise backups.Terminated()
        fsync_dir(path)

    monkeypatch.setattr(originals, "fsync_dir", stopped_after_the_manifest)
    dest = tmp_path / "backup"
    code, out = run("backup", str(dest))

    assert code == 1, out
    assert f"The backup in {dest} is whole: it was stopped (SIGTERM) only after its " in out
    assert "but 1 original its rows name is not in it: run check_originals" in out, out


@pytest.mark.parametrize("missing", [False, True], ids=["whole", "lacking an original"])
def test_a_sigterm_while_the_last_lines_are_said_changes_nothing(tmp_path, missing, monkeypatch):
    """Found by a backup review: a SIGTERM just after "Manifest: …" ended the process with
    -15 and no sentence: the handler was gone while its last lines were said."""
    asset = stored(1)
    at_the_end = []
    close_all = connections.close_all

    def closing_at_the_end() -> None:  # what Django does after the command, before exit
        at_the_end.append(signal.getsignal(signal.SIGTERM))
        close_all()

    monkeypatch.setattr(connections, "close_all", closing_at_the_end)
    if missing:
        file_of(asset).unlink()
    command = BackupCommand()
    real_write = command.stdout.write

    def write(line: str, *args, **kwargs) -> None:
        real_write(line, *args, **kwargs)
        if line.startswith("Manifest:"):
            os.kill(os.getpid(), signal.SIGTERM)  # as a service manager's stop would land

    command.stdout.write = write  # type: ignore[method-assign]
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as ended:
            command.run_from_argv(["manage.py", "backup", str(tmp_path / "backup")])
            raise SystemExit(0)
        # What Python's shutdown keeps (it puts the default back over a handler of its own).
        at_the_end.append(signal.getsignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert ended.value.code == (1 if missing else 0)
    assert manifest(tmp_path / "backup")["originals"] or missing
    assert len(at_the_end) == 2 and signal.SIG_DFL not in at_the_end, at_the_end
    assert at_the_end[-1] == signal.SIG_IGN, "a SIGTERM in Python's shutdown ends it with -15"


def test_it_refuses_a_data_dir_whose_originals_folder_is_not_there(tmp_path, settings):
    """Found by a backup review: run with the wrong data dir (AVATARS_DATA_DIR unset for a
    PostgreSQL install), it listed every original as missing and never said why."""
    stored(1)
    settings.AVATARS_DATA_DIR = tmp_path / "not-this-install"
    dest = tmp_path / "backup"

    code, out = run("backup", str(dest))

    assert code == 1
    folder = tmp_path / "not-this-install" / "originals"
    assert out.strip() == (
        f"The originals folder {folder} is not there, while the database names originals: "
        "is AVATARS_DATA_DIR this install's, and its disk mounted? Nothing was backed up."
    ), out
    assert not dest.exists()
