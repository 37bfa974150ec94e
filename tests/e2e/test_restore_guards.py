"""Restore and backup as an operator runs them, when something else is going on (found by a
review): a stale WAL beside the database, a second restore at once, a restore killed
midway, a Ctrl-C. Each is a real `manage.py` process; `tests/pausepoints.py` stops one
at a known step so the other thing happens there and nowhere else.
"""

import shutil
import signal
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

from studio.serving import studio_command
from tests.pausepoints import finish, start, wait_paused
from tests.processes import Simulator, Stack, free_port, seed, server_url

PROVIDERS = [{"provider": "openai", "candidates": 1}]
FILLING = "studio.restoring:fill_sqlite"  # the originals are in place, the database not yet
UNDOING = "studio.restoring:undo"  # a stopped restore is about to take back what it placed
COPYING = "studio.backups:back_up_original"  # the snapshot is taken, no original copied yet
UNFINISHED = "A restore into this data dir has not finished"

# These look at the SQLite files themselves.
pytestmark = pytest.mark.skipif(bool(server_url()), reason="SQLite's files")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    simulator = Simulator(tmp_path_factory.mktemp("sim"), job_seconds=0)
    yield simulator
    simulator.stop()


@pytest.fixture
def backup(stack: Stack, tmp_path: Path) -> Path:
    """A finished backup of an install with two subjects' photos and a waiting batch."""
    seed(stack, providers=PROVIDERS, frames=["image"])
    stack.manage("backup", str(tmp_path / "backup"))
    return tmp_path / "backup"


@pytest.fixture
def restored(sim: Simulator, tmp_path: Path) -> Stack:
    """A new install to restore into: its data dir does not exist yet."""
    return Stack(tmp_path / "restored", sim)


def restore(install: Stack, backup: Path) -> tuple[int, str]:
    done = install.run(sys.executable, "manage.py", "restore", str(backup))
    return done.returncode, done.stdout + done.stderr


def integrity(database: Path) -> str:
    with closing(sqlite3.connect(database)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def subjects(database: Path) -> list[str]:
    with closing(sqlite3.connect(database)) as conn:
        return sorted(name for (name,) in conn.execute("SELECT name FROM studio_subject"))


def placed(install: Stack) -> list[str]:
    folder = install.data_dir / "originals"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def assert_restored(install: Stack, backup: Path) -> None:
    """Everything the backup holds is in place, whole, and no restore is unfinished."""
    database = install.data_dir / "db.sqlite3"
    assert integrity(database) == "ok"
    assert subjects(database) == subjects(backup / "db.sqlite3") == ["Ada", "Bo"]
    assert placed(install) == sorted(p.name for p in (backup / "originals").iterdir())
    assert not (install.data_dir / "RESTORE-UNFINISHED").exists()


def leave_a_stale_wal(data_dir: Path, backup: Path) -> list[Path]:
    """Leave beside a new db.sqlite3 the -wal and -shm of a database that crashed there."""
    data_dir.mkdir()
    database = data_dir / "db.sqlite3"
    shutil.copyfile(backup / "db.sqlite3", database)
    sides = [data_dir / "db.sqlite3-wal", data_dir / "db.sqlite3-shm"]
    with closing(sqlite3.connect(database)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        with conn:
            conn.execute("UPDATE studio_subject SET name = 'Stale ' || name")
            conn.execute("DELETE FROM studio_task")
        for side in sides:  # as the crash left them: the close below would checkpoint
            shutil.copyfile(side, side.with_name(f"{side.name}.kept"))
    database.unlink()  # the operator removed the damaged database
    for side in sides:
        side.with_name(f"{side.name}.kept").rename(side)
    return sides


def test_a_restore_refuses_side_files_an_old_database_left_and_places_nothing(
    restored: Stack, backup: Path
):
    sides = leave_a_stale_wal(restored.data_dir, backup)

    code, said = restore(restored, backup)

    assert code == 1, said
    assert "db.sqlite3-wal" in said and "db.sqlite3-shm" in said
    assert "remove them and run the restore again" in said
    assert (restored.data_dir / "db.sqlite3").stat().st_size == 0
    assert placed(restored) == [] and not (restored.data_dir / "RESTORE-UNFINISHED").exists()
    assert all(side.exists() for side in sides)  # the operator's to remove, not the restore's

    for side in sides:
        side.unlink()
    code, said = restore(restored, backup)
    assert code == 0, said
    assert_restored(restored, backup)


def test_a_second_restore_into_the_same_data_dir_is_refused_while_the_first_runs(
    restored: Stack, backup: Path
):
    first = start(FILLING, "restore", str(backup), env=restored.env)
    wait_paused(first)
    marker = (restored.data_dir / "RESTORE-UNFINISHED").read_text()
    originals = placed(restored)

    code, said = restore(restored, backup)

    assert code == 1, said
    assert "A restore into this data dir is running now" in said
    assert (restored.data_dir / "RESTORE-UNFINISHED").read_text() == marker
    assert placed(restored) == originals
    assert (restored.data_dir / "db.sqlite3").stat().st_size == 0
    code, said = finish(first)
    assert code == 0, said
    assert_restored(restored, backup)


def test_a_restore_killed_midway_is_named_by_every_command_until_run_again(
    restored: Stack, backup: Path, tmp_path: Path
):
    killed = start(FILLING, "restore", str(backup), env=restored.env)
    wait_paused(killed)
    killed.kill()
    killed.communicate()
    assert (restored.data_dir / "db.sqlite3").stat().st_size == 0

    for command in (
        ["run_worker", "--once"],
        ["check_originals"],
        ["reconcile", "--all"],
        ["backup", str(tmp_path / "again")],
        ["migrate"],  # found by a review: it applied every migration to the half-filled db
    ):
        done = restored.run(sys.executable, "manage.py", *command)
        said = done.stdout + done.stderr
        assert done.returncode == 1, (command, said)
        assert UNFINISHED in said, (command, said)
        assert "migrate" not in said, (command, said)
    # And the web server, which served the sign-in page over half the rows.
    served = restored.run(*studio_command(sys.executable, free_port()), timeout=60)
    said = served.stdout + served.stderr
    assert served.returncode != 0, said
    assert f"Avatars cannot start: {UNFINISHED}" in said, said
    with closing(sqlite3.connect(restored.data_dir / "db.sqlite3")) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [], f"migrate made {len(tables)} tables in the half-filled database"

    code, said = restore(restored, backup)  # the killed run's lock died with it
    assert code == 0, said
    assert_restored(restored, backup)


STOPS = [
    (signal.SIGINT, "it was interrupted (Ctrl-C)"),
    (signal.SIGTERM, "it was stopped (SIGTERM)"),
]


@pytest.mark.parametrize(("stop", "why"), STOPS)
def test_ctrl_c_during_a_restore_takes_away_what_it_placed_and_says_to_run_it_again(
    restored: Stack, backup: Path, stop: signal.Signals, why: str
):
    """A Ctrl-C, or the SIGTERM a service manager sends: a sentence, nothing left placed."""
    running = start(FILLING, "restore", str(backup), env=restored.env)
    wait_paused(running)
    running.send_signal(stop)

    code, said = finish(running)

    assert code == 1, said
    assert "Traceback" not in said
    assert f"The restore stopped: {why}." in said
    assert "run it again" in said
    assert placed(restored) == [] and not (restored.data_dir / "RESTORE-UNFINISHED").exists()
    assert (restored.data_dir / "db.sqlite3").stat().st_size == 0
    code, said = restore(restored, backup)
    assert code == 0, said
    assert_restored(restored, backup)


def test_a_second_ctrl_c_while_a_restore_takes_back_what_it_placed_waits_for_it(
    restored: Stack, backup: Path
):
    """Found by a review: the second Ctrl-C stopped the undo half way, under a sentence that
    said what the restore had placed was taken away."""
    running = start(f"{FILLING},{UNDOING}", "restore", str(backup), env=restored.env)
    wait_paused(running)  # the originals are in place
    running.send_signal(signal.SIGINT)
    running.send_signal(signal.SIGCONT)
    wait_paused(running)  # about to take them back
    running.send_signal(signal.SIGINT)

    code, said = finish(running)

    assert code == 1, said
    assert "Traceback" not in said
    assert "The restore stopped: it was interrupted (Ctrl-C)." in said
    assert placed(restored) == [], "the undo was cut short: originals are left in place"
    assert not (restored.data_dir / "RESTORE-UNFINISHED").exists()
    assert (restored.data_dir / "db.sqlite3").stat().st_size == 0
    code, said = restore(restored, backup)
    assert code == 0, said
    assert_restored(restored, backup)


@pytest.mark.parametrize(("stop", "why"), STOPS)
def test_ctrl_c_during_a_backup_says_to_remove_its_folder(
    stack: Stack, tmp_path: Path, stop: signal.Signals, why: str
):
    seed(stack, providers=PROVIDERS, frames=["image"])
    dest = tmp_path / "backup"
    running = start(COPYING, "backup", str(dest), env=stack.env)
    wait_paused(running)
    running.send_signal(stop)

    code, said = finish(running)

    assert code == 1, said
    assert "Traceback" not in said
    assert f"The backup stopped: {why}." in said
    assert f"What it wrote in {dest} is not a backup" in said and "remove that folder" in said
    assert not (dest / "manifest.json").exists()
    again = stack.run(sys.executable, "manage.py", "backup", str(tmp_path / "next"))
    assert again.returncode == 0, again.stdout + again.stderr
