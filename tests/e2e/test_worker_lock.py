"""One owner per database: the worker's locks, over real processes (docs/design.md §6)."""

import signal
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from studio.ownership import ADVISORY_KEY, NOT_DURABLE, NotDurable, check_durable
from tests.processes import Simulator, Stack, server_url

REFUSED = "Another Avatars worker already owns this database"


def start_worker(stack: Stack):
    proc = stack.popen(sys.executable, "manage.py", "run_worker")
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the locks are held
    assert "Avatars worker running" in line, line + proc.stdout.read()
    return proc


def refused(stack: Stack) -> bool:
    second = stack.run(sys.executable, "manage.py", "run_worker", timeout=60)
    return second.returncode != 0 and REFUSED in second.stdout + second.stderr


def test_it_refuses_a_second_worker_on_the_same_data_dir(stack: Stack):
    first = start_worker(stack)
    try:
        assert refused(stack)
        assert first.poll() is None  # the owner is untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 0


def test_a_new_worker_starts_after_the_owner_is_killed(stack: Stack):
    first = start_worker(stack)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)

    # No PID file, nothing to clean: the kernel freed the locks with the process.
    second = start_worker(stack)
    try:
        assert refused(stack)  # and the new owner holds them in turn
        assert second.poll() is None
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0


def test_it_refuses_a_second_worker_whose_data_dir_names_the_same_sqlite_file(
    sim: Simulator, tmp_path: Path
):
    # Two installs, two data dirs (two worker.lock files), one SQLite database file.
    database = tmp_path / "shared" / "avatars.sqlite3"
    database.parent.mkdir()
    url = f"sqlite:///{database}"
    here = Stack(tmp_path / "here", sim, DATABASE_URL=url)
    there = Stack(tmp_path / "there", sim, DATABASE_URL=url)
    here.manage("migrate", "--verbosity", "0")
    first = start_worker(here)
    try:
        assert refused(there)
        assert first.poll() is None  # the owner is untouched
        # The lock sits beside the database file, never on it.
        assert (database.parent / "avatars.sqlite3.worker-lock").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
    # Once the owner is gone, the other install may run.
    second = start_worker(there)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_worker_on_another_machine_is_refused_too(stack: Stack, tmp_path: Path):
    # Another data dir stands for another machine: the flocks do not meet there.
    elsewhere = Stack(
        tmp_path / "elsewhere", stack.simulator, DATABASE_URL=stack.env["DATABASE_URL"]
    )
    first = start_worker(stack)
    try:
        assert refused(elsewhere)
        first.send_signal(signal.SIGKILL)  # the owner's connection dies with it
        first.wait(timeout=30)
        second = start_worker(elsewhere)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_worker_whose_lock_session_is_ended_stops_at_once(stack: Stack):
    import psycopg

    worker = start_worker(stack)
    try:
        # Someone ends the session that holds the worker's advisory lock; the server
        # stays up, so another worker could take the lock now.
        with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks"
                " WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [ADVISORY_KEY >> 32, ADVISORY_KEY & 0xFFFF_FFFF],
            ).fetchall()
        assert ended == [(True,)]
        out, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode != 0
    assert "lost its lock on the database" in out


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
@pytest.mark.django_db
def test_on_postgresql_it_refuses_to_run_without_synchronous_commit():
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    try:
        with pytest.raises(NotDurable, match="synchronous_commit is off"):
            check_durable()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = on")
    check_durable()  # and on, it runs
    assert "Turn synchronous_commit on" in NOT_DURABLE


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_running_worker_holds_two_connections(stack: Stack):
    """Its lock's session and its database thread's: the start-up checks' connection had
    stayed open, idle, for the process's life (a review's, in CLOSE-WAIT after a restart)."""
    import psycopg

    worker = start_worker(stack)
    try:
        time.sleep(3)  # a few of its passes: the database thread's connection is open
        with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
            held = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone()[0]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert held == 2, f"{held} connections held by an idle worker"
