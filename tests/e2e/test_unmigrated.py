"""Commands run on a database that was never migrated: one sentence saying what to run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

COMMANDS = pytest.mark.parametrize(
    "command",
    [
        ["run_worker", "--once"],
        ["check_originals"],
        ["reconcile", "--all"],
        ["backup", "{tmp}/backup"],
        ["api_token", "--create-user", "ada"],
    ],
    ids=lambda command: command[0],
)


def run(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AVATARS_DATA_DIR": str(tmp_path / "data")}
    env.pop("DATABASE_URL", None)  # a data dir of its own, on SQLite
    return subprocess.run(
        [sys.executable, "manage.py", *[part.format(tmp=tmp_path) for part in command]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@COMMANDS
def test_a_command_on_a_database_never_migrated_says_to_migrate(tmp_path: Path, command):
    """Found by a review: the worker said it was running, then printed 90 lines of
    "no such table"; check_originals and reconcile 55, backup "no such table" in a line."""
    done = run(tmp_path, command)

    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: The database is not set up for this version"), line
    assert line.endswith(
        "run `manage.py migrate` first (or `manage.py restore` into an empty data dir)."
    )
    assert not (tmp_path / "backup").exists()


@COMMANDS
def test_a_command_on_a_database_it_cannot_use_says_so_in_a_sentence(tmp_path: Path, command):
    """Found by a review: on a full disk SQLite could not make its side files ("disk I/O
    error"), and backup, check_originals and reconcile each printed a traceback of 82 lines.
    The same path is taken here by a file that is no database."""
    database = tmp_path / "data" / "db.sqlite3"
    database.parent.mkdir(exist_ok=True)
    database.write_bytes(b"not a database, " * 512)

    done = run(tmp_path, command)

    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"CommandError: Avatars cannot use its database {database} (file is not a database). "
        "If its disk is full or read-only, free space on it or let it be written, then run "
        "this again."
    )
    assert not (tmp_path / "backup").exists()
