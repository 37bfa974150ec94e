"""What a restore refuses, and what it never reports as restored (found by a review).

The same guards over real processes, with a stale WAL, a second run, a kill and a Ctrl-C,
are in tests/e2e/test_restore_guards.py.
"""

import json
import os
import signal
import sqlite3
from contextlib import closing
from datetime import datetime
from pathlib import Path

import pytest
from django.utils import timezone

from studio import backups, flocks, originals, restoring
from tests.backup_parts import restore_into, run, run_restore, sqlite_only, stored

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def damage_as_filled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scribble over the filled database's asset table just before it is checked."""
    real = restoring.fsync_file

    def scribbled(path: Path) -> None:
        if path.name.endswith(".restoring"):
            with closing(sqlite3.connect(path)) as conn:
                page = conn.execute("PRAGMA page_size").fetchone()[0]
                root = conn.execute(
                    "SELECT rootpage FROM sqlite_master WHERE name = 'studio_asset'"
                ).fetchone()[0]
            with path.open("r+b") as file:
                file.seek((root - 1) * page)
                file.write(b"\xff" * page)
        real(path)

    monkeypatch.setattr(restoring, "fsync_file", scribbled)


@sqlite_only
def test_it_never_puts_in_place_a_database_damaged_as_it_was_filled(tmp_path, monkeypatch):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    damage_as_filled(monkeypatch)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert "The restored database was damaged as it was filled" in str(refused.value)
    assert database.stat().st_size == 0
    assert list((target / "originals").iterdir()) == []
    assert not (target / restoring.MARKER).exists()
    assert not (target / "db.sqlite3.restoring").exists()


@sqlite_only
def test_it_refuses_a_rollback_journal_left_beside_the_database(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    journal = target / "db.sqlite3-journal"
    journal.write_bytes(b"left by a crash")

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert str(refused.value) == (
        f"{journal} is left beside {database} from an earlier database, and SQLite would "
        "play it into the restored one: with no studio process running on this data dir, "
        "remove it and run the restore again. Nothing was restored."
    )
    assert not (target / "originals").exists() and database.stat().st_size == 0


@sqlite_only
def test_a_restore_is_refused_at_once_while_another_runs_into_the_data_dir(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    with flocks.held(target / restoring.LOCK) as held:
        assert held
        with pytest.raises(backups.BackupError) as refused:
            restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert str(refused.value).startswith("A restore into this data dir is running now")
    assert not (target / "originals").exists() and not (target / restoring.MARKER).exists()
    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert (again.restored, again.problems) == (1, [])


@sqlite_only
def test_a_restore_is_refused_while_a_worker_runs_on_the_data_dir(tmp_path):
    """Found by a review: the worker went on against the database deleted under it, and
    then held the restored one (the restore's own "Next: run_worker" was refused)."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    with flocks.held(target / "worker.lock") as held:  # what a running worker holds
        assert held
        with pytest.raises(backups.BackupError) as refused:
            restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert str(refused.value) == (
        f"A worker runs on this data dir ({target / 'worker.lock'} is held): stop it, then "
        "run the restore again. Nothing was changed."
    )
    assert not (target / "originals").exists() and not (target / restoring.MARKER).exists()
    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert (again.restored, again.problems) == (1, [])


@pytest.mark.parametrize(
    "command",
    [
        ["run_worker", "--once"],
        ["check_originals"],
        ["reconcile", "--all"],
        ["backup", "DEST"],
        ["api_token", "ada", "--create-user"],
    ],
)
def test_every_command_that_needs_the_database_says_first_that_a_restore_is_unfinished(
    command, data_dir, tmp_path
):
    (data_dir / restoring.MARKER).write_text(f"restoring {tmp_path / 'backup'}\n")
    argv = [str(tmp_path / "dest") if arg == "DEST" else arg for arg in command]

    code, out = run(*argv)

    assert code == 1
    assert out.startswith("A restore into this data dir has not finished"), out
    assert "run the same `manage.py restore` again" in out
    assert not (tmp_path / "dest").exists()


@sqlite_only
def test_a_restore_run_again_after_it_had_finished_says_so_and_changes_nothing(tmp_path):
    """Found by a review: killed in the moment after it finished, the restore run again said
    the target "already holds originals: restore into a new data dir", which is redoing it."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    filled = database.read_bytes()

    with pytest.raises(restoring.AlreadyRestored) as again:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert str(again.value) == (
        f"This data dir was restored from {tmp_path / 'backup'} already: that restore "
        "finished (it may have been stopped just after). Nothing was changed."
    )
    assert database.read_bytes() == filled
    run("backup", str(tmp_path / "other"))
    with pytest.raises(backups.BackupError, match="already holds originals"):
        restoring.restore(tmp_path / "other", data_dir=target, database=database)


def test_the_command_says_a_finished_restore_has_finished_and_exits_zero(tmp_path, monkeypatch):
    def finished(src: Path) -> None:
        raise restoring.AlreadyRestored(src)

    monkeypatch.setattr(restoring, "restore", finished)

    code, out = run("restore", str(tmp_path))

    assert code == 0, out
    assert f"This data dir was restored from {tmp_path} already" in out
    assert "Next: manage.py migrate" in out


def test_a_stop_the_moment_a_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """Found by a re-review: a SIGTERM during the open of a write's temporary file (slow on a
    busy disk) was raised before the cleanup covered it; the empty file left in originals/
    then refused the restore run again "already holds originals"."""
    real_open = os.open

    def opened_then_stopped(path, flags, mode=0o777):
        os.close(real_open(path, flags, mode))
        raise backups.Terminated()  # as the SIGTERM handler raises it once the call returns

    monkeypatch.setattr(originals.os, "open", opened_then_stopped)

    with pytest.raises(backups.Terminated):
        originals.write_atomically(tmp_path / "written" / "a.png", b"bytes")

    assert os.listdir(tmp_path / "written") == []


@sqlite_only
def test_a_temporary_file_a_stopped_write_left_does_not_make_a_target_used(tmp_path):
    """What a killed write leaves is no original: the same restore may run again."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    (target / "originals").mkdir()
    (target / "originals" / ".abc.png.0123456789ab.tmp").write_bytes(b"")

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 1 and restored.problems == []


@sqlite_only
def test_a_new_filesystem_s_lost_and_found_does_not_make_a_target_used(tmp_path):
    """Found by a review: a fresh filesystem mounted at originals/ has `lost+found`, and
    the restore refused it as a folder that "already holds originals"."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    (target / "originals" / "lost+found").mkdir(parents=True)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 1 and restored.problems == []
    assert (target / "originals" / "lost+found").is_dir()


@sqlite_only
def test_a_sigterm_in_a_restores_last_step_lets_it_finish(tmp_path, monkeypatch):
    """Found by a re-review: stopped as it wrote RESTORED or removed its marker, a restore
    said "What it had placed was taken away" and exited 1, though nothing was taken away
    (or all of it was restored)."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    write = originals.write_atomically

    def stopped_as_it_says_it_finished(path: Path, data: bytes) -> None:
        if path.name == restoring.DONE:
            os.kill(os.getpid(), signal.SIGTERM)  # as a service manager's stop would land
        write(path, data)

    monkeypatch.setattr(originals, "write_atomically", stopped_as_it_says_it_finished)

    with backups.stopped_by_sigterm():
        restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 1
    assert (target / restoring.DONE).is_file()
    assert not (target / restoring.MARKER).exists()


@sqlite_only
def test_the_restore_says_what_was_done_after_the_backup_is_not_in_it(tmp_path):
    """Found by a review: a batch paid for after the backup was gone from the restored
    install with no word, its originals on the lost install's disk only."""
    stored(1)
    run("backup", str(tmp_path / "backup"))
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    taken = timezone.localtime(datetime.fromisoformat(manifest["created_at"]))
    target, database = restore_into(tmp_path)

    code, out = run_restore(tmp_path / "backup", target, database)

    assert code == 0, out
    assert (
        f"What was planned or paid for after this backup (at {taken:%Y-%m-%d %H:%M %Z}) is "
        "not in it: keep the lost install's data dir if it is still there."
    ) in out, out
