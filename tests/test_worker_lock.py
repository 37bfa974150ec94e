"""One owner per database: the worker's flock, over real processes (SPEC §6)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFUSED = "Another Avatars worker already owns this database"


def manage(data_dir: Path, *args: str, **kwargs) -> subprocess.Popen:
    env = {
        **os.environ,
        "AVATARS_DATA_DIR": str(data_dir),
        "EMBER_URL": "http://127.0.0.1:9",  # nothing listens: no task is ever sent anyway
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def start_worker(data_dir: Path) -> subprocess.Popen:
    proc = manage(data_dir, "run_worker")
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the lock is held
    assert "Avatars worker running" in line, line
    return proc


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    proc = manage(data_dir, "migrate", "--verbosity", "0")
    assert proc.wait(timeout=120) == 0, proc.stdout.read() if proc.stdout else ""
    return data_dir


def test_it_refuses_a_second_worker_on_the_same_data_dir(migrated):
    first = start_worker(migrated)
    try:
        second = manage(migrated, "run_worker")
        out, _ = second.communicate(timeout=60)
        assert second.returncode != 0
        assert REFUSED in out
        assert first.poll() is None  # the owner is untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 0


def test_a_new_worker_starts_after_the_owner_is_killed(migrated):
    first = start_worker(migrated)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)

    # No PID file, nothing to clean: the kernel freed the lock with the process.
    second = start_worker(migrated)
    try:
        third = manage(migrated, "run_worker")
        out, _ = third.communicate(timeout=60)
        assert REFUSED in out  # and the new owner holds it in turn
        assert second.poll() is None
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
