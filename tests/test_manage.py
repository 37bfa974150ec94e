"""`manage.py` itself: what reaches an operator when a command's database fails mid-way."""

import os
import runpy
import signal
import subprocess
import sys

import pytest
from django.db import IntegrityError, OperationalError

from tests.processes import ROOT


def run_manage(monkeypatch, error: Exception) -> None:
    def fails(_argv: list[str]) -> None:
        raise error

    monkeypatch.setattr("django.core.management.execute_from_command_line", fails)
    monkeypatch.setattr("sys.argv", ["manage.py", "check_originals"])
    runpy.run_path(str(ROOT / "manage.py"), run_name="__main__")


def test_a_database_its_disk_refuses_mid_command_is_said_in_one_sentence(monkeypatch):
    """Found by a review: on a full disk whose database had its side files already (a web
    server running), check_originals and api_token each printed 62 lines of traceback."""
    with pytest.raises(SystemExit) as ended:
        run_manage(monkeypatch, OperationalError("database or disk is full"))

    assert ended.value.code == (
        "Avatars could not use its database: database or disk is full. If its disk is full "
        "or read-only, free space on it or let it be written, then run this again."
    )


def test_a_fault_of_the_code_keeps_its_traceback(monkeypatch):
    with pytest.raises(IntegrityError):
        run_manage(monkeypatch, IntegrityError("UNIQUE constraint failed"))


# Ctrl-C while Django starts, as the command's argv is read: made at once, in a process.
CTRL_C_AT_START = """
import runpy, sys
import django.core.management
def interrupted(_argv):
    raise KeyboardInterrupt
django.core.management.execute_from_command_line = interrupted
sys.argv = ["manage.py", "backup", "/nowhere"]
runpy.run_path("manage.py", run_name="__main__")
"""


def test_a_ctrl_c_no_command_had_yet_ends_by_the_signal_with_a_sentence():
    """Found by a review: Ctrl-C in a backup's first half second (Django's start-up, before
    the command's own handler) printed a traceback through Django's imports. It ends as a
    Ctrl-C does (by SIGINT): a shell's loop over backups stops there too."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT_START],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)
    assert done.stderr == "Interrupted (Ctrl-C).\n"


# The metrics folder's disk full as the process starts: its figure files cannot be given
# their room (`studio.metrics.give_room`). argv after `-c` names the command.
FULL_METRICS_DISK = """
import errno, os, runpy, sys
def full(fd, offset, length):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
os.posix_fallocate = full
sys.argv = ["manage.py", *sys.argv[1:]]
runpy.run_path("manage.py", run_name="__main__")
"""


def test_an_operators_command_runs_on_a_full_metrics_disk_and_the_worker_refuses(tmp_path):
    """Found by a review: on a full disk every command refused to start for want of room
    for its figures, check_originals and backup among them, the tools for that very day.
    They count alone and say so; the worker, whose figures /metrics serves, still refuses."""
    folder = tmp_path / "metrics"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(AVATARS_DATA_DIR=str(tmp_path), AVATARS_METRICS_DIR=str(folder))

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", FULL_METRICS_DISK, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    said = f"The figures for /metrics cannot be kept in {folder} (No space left on device)"
    for args in (["migrate"], ["check_originals"]):
        done = manage(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert f"{said}: this command's figures are not kept for /metrics." in done.stderr
    assert "Checked 0 original" in done.stdout, done.stdout
    assert list(folder.iterdir()) == [], "a command that counts alone left figure files"

    worker = manage("run_worker", "--once")
    assert worker.returncode == 1, (worker.stdout, worker.stderr)
    assert worker.stderr.strip() == (
        f"Avatars cannot start: {said}: free space on its disk, or set AVATARS_METRICS_DIR "
        "to a folder on another disk."
    )
