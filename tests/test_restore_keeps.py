"""A restore that fails takes away only what it can give back: never an original that was in
place before it ran, which may be the only whole copy (docs/operations.md).

Found by a review: a finished restore whose database was lost since is run again; if that
run failed or was stopped, it took away every original the backup names, whether it had
placed it or not, and an original whose copy in the backup was damaged was lost for good.
"""

import os
from pathlib import Path

import pytest

from studio import originals, restoring
from tests.backup_parts import (
    placed,
    restore_into,
    run,
    sqlite_only,
    stop_once_an_original_is_placed,
)

pytestmark = [pytest.mark.django_db(transaction=True), sqlite_only]


def restored_then_database_lost(backup: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A finished restore whose database is emptied since, and one of whose originals is
    damaged in the backup now: the copy in the data dir is the only whole one."""
    target, database = restore_into(tmp_path)
    restoring.restore(backup, data_dir=target, database=database)
    database.write_bytes(b"")
    only = sorted((backup / "originals").iterdir())[0]
    only.write_bytes(b"damaged in the backup since")
    return target, database, target / "originals" / only.name


def test_a_failed_second_run_keeps_the_only_whole_copy_and_its_marker(backup, tmp_path):
    target, database, only = restored_then_database_lost(backup, tmp_path)
    whole = only.read_bytes()
    blocked = database.with_name(f"{database.name}.restoring")
    blocked.mkdir()  # the database cannot be made ready: a fault in filling it

    with pytest.raises(restoring.Stopped) as stopped:
        restoring.restore(backup, data_dir=target, database=database)

    assert only.read_bytes() == whole, "the only whole copy of an original was taken away"
    assert len(placed(target)) == 2
    assert (target / restoring.MARKER).exists()
    assert str(stopped.value).endswith(
        "It had copied none; 2 more files under the names of the backup's originals were in "
        "place before it ran and stay there, and RESTORE-UNFINISHED keeps this install from "
        "starting until the same restore, run again, finishes it (or use a new data dir)."
    )
    blocked.rmdir()
    again = restoring.restore(backup, data_dir=target, database=database)
    # The damaged copy in the backup was not needed: the whole one in place was counted.
    assert (again.restored, again.problems) == (2, [])
    assert again.placer.counts("Restored") == (
        "Restored 2 originals: 0 hard-linked, 0 copied, 2 already in place, each checked "
        "against its hash."
    )
    assert originals.sha256_of(only.read_bytes()) == only.name.split(".")[0]


def test_a_second_run_stopped_part_way_keeps_what_was_in_place(backup, tmp_path, monkeypatch):
    target, database, only = restored_then_database_lost(backup, tmp_path)
    whole = only.read_bytes()
    other = next(p for p in (target / "originals").iterdir() if p != only)
    other.unlink()  # this run copies it from the backup, then is stopped
    stop_once_an_original_is_placed(monkeypatch)
    with pytest.raises(restoring.Stopped) as stopped:
        restoring.restore(backup, data_dir=target, database=database)

    assert "The restore stopped: it was interrupted (Ctrl-C)." in str(stopped.value)
    assert only.read_bytes() == whole, "the only whole copy of an original was taken away"
    assert not other.exists(), "what this run copied (the backup holds it) stays"
    monkeypatch.undo()
    again = restoring.restore(backup, data_dir=target, database=database)
    assert (again.restored, again.problems) == (2, [])
    assert not (target / restoring.MARKER).exists()


def test_the_command_says_what_stays_and_exits_1(tmp_path, monkeypatch):
    def stopped(*_args: object, **_kwargs: object) -> None:
        raise restoring.Stopped(KeyboardInterrupt(), 2, copied=True)

    monkeypatch.setattr(restoring, "restore", stopped)
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert out.startswith(
        "The restore stopped: it was interrupted (Ctrl-C). It took away the originals it had "
        "copied; 2 more files under the names of the backup's originals were in place before "
        "it ran and stay there, and RESTORE-UNFINISHED keeps"
    ), out
    assert "the database left empty" not in out


def test_a_file_named_as_the_backup_is_said_to_be_no_folder(tmp_path):
    file = tmp_path / "backup.tar"
    file.write_bytes(b"not a folder")

    code, out = run("restore", str(file))

    assert code == 1
    assert f"{file} is not a folder: name the backup's folder." in out
    assert "taken away" not in out


def test_a_finished_restore_whose_database_is_no_database_now_is_said_so(backup, tmp_path):
    target, database = restore_into(tmp_path)
    restoring.restore(backup, data_dir=target, database=database)
    database.write_bytes(b"\x9e" * 4096)

    with pytest.raises(restoring.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=database)

    assert str(refused.value) == (
        f"The database {database} is not an empty SQLite database (file is not a database): "
        "restore into a new data dir with an empty database."
    )
    assert len(placed(target)) == 2


def test_a_run_again_pointed_at_another_database_is_refused_and_changes_it_not(
    backup, tmp_path, monkeypatch
):
    """Found by a review: with the marker there, a run again never asked whether its
    database was empty; pointed at a live one (a wrong environment), it replaced it, or,
    stopped, emptied it: a live PostgreSQL database dropped with exit 0."""
    target, database = restore_into(tmp_path)

    def killed(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(restoring, "fill", killed)
    with pytest.raises(KeyboardInterrupt):
        restoring.restore(backup, data_dir=target, database=database)
    (target / restoring.MARKER).write_text(  # as a SIGKILL leaves it: no undo
        f"restoring {backup}\ninto {database.resolve()}\n"
    )
    monkeypatch.undo()
    live = tmp_path / "live.sqlite3"
    live.write_bytes((backup / "db.sqlite3").read_bytes())  # another install's, in use
    before = live.read_bytes()

    with pytest.raises(restoring.BackupError) as refused:
        restoring.restore(backup, data_dir=target, database=live)

    assert str(refused.value) == (
        f"The unfinished restore in this data dir was filling the database "
        f"{database.resolve()}, and this run is pointed at {live.resolve()}: point it at "
        f"{database.resolve()} (AVATARS_DATA_DIR, DATABASE_URL) and run it again. Nothing "
        "was changed."
    )
    assert live.read_bytes() == before
    again = restoring.restore(backup, data_dir=target, database=database)
    assert (again.restored, again.problems) == (2, [])


def test_an_original_in_place_that_is_the_backup_s_own_file_is_copied_anew(backup, tmp_path):
    """Found by a review: a hard link into the backup, in an original's place, was counted
    as restored: every later write to one would be in the other."""
    target, database, _only = restored_then_database_lost(backup, tmp_path)
    whole = sorted((backup / "originals").iterdir())[1]
    linked = target / "originals" / whole.name
    linked.unlink()
    os.link(whole, linked)

    again = restoring.restore(backup, data_dir=target, database=database)

    assert again.problems == [], again.problems
    assert not os.path.samefile(whole, linked), "the restored original is the backup's file"
    assert linked.read_bytes() == whole.read_bytes()
