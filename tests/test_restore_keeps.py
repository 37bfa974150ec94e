"""A restore that fails takes away only what it can give back: never an original that was in
place before it ran, which may be the only whole copy (docs/operations.md).

Found by a review: a finished restore whose database was lost since is run again; if that
run failed or was stopped, it took away every original the backup names, whether it had
placed it or not, and an original whose copy in the backup was damaged was lost for good.
"""

from pathlib import Path

import pytest

from studio import originals, restoring
from tests.backup_parts import placed, restore_into, run, sqlite_only, stored

pytestmark = [pytest.mark.django_db(transaction=True), sqlite_only]


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """A backup of two stored originals."""
    stored(1)
    stored(2)
    run("backup", str(tmp_path / "backup"))
    return tmp_path / "backup"


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
        "It took away the originals it had copied from the backup; 2 more that the backup "
        "names were in place before it ran and stay there, and RESTORE-UNFINISHED keeps this "
        "install from starting until the same restore, run again, finishes it."
    )
    blocked.rmdir()
    again = restoring.restore(backup, data_dir=target, database=database)
    # The damaged copy in the backup was not needed: the whole one in place was counted.
    assert (again.restored, again.problems) == (2, [])
    assert originals.sha256_of(only.read_bytes()) == only.name.split(".")[0]


def test_a_second_run_stopped_part_way_keeps_what_was_in_place(backup, tmp_path, monkeypatch):
    target, database, only = restored_then_database_lost(backup, tmp_path)
    whole = only.read_bytes()
    other = next(p for p in (target / "originals").iterdir() if p != only)
    other.unlink()  # this run copies it from the backup, then is stopped
    real = originals.write_atomically

    def placed_then_stopped(path: Path, data: bytes) -> None:
        real(path, data)
        if path.parent.name == "originals":
            raise KeyboardInterrupt

    monkeypatch.setattr(originals, "write_atomically", placed_then_stopped)
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
        raise restoring.Stopped(KeyboardInterrupt(), 2)

    monkeypatch.setattr(restoring, "restore", stopped)
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert out.startswith(
        "The restore stopped: it was interrupted (Ctrl-C). It took away the originals it had "
        "copied from the backup; 2 more that the backup names were in place before it ran "
        "and stay there, and RESTORE-UNFINISHED keeps"
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
