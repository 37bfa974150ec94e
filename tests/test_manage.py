"""`manage.py` itself: what reaches an operator when a command's database fails mid-way."""

import runpy

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


def test_a_ctrl_c_no_command_had_yet_ends_with_130_and_a_sentence(monkeypatch, capsys):
    """Found by a review: Ctrl-C in a backup's first half second (Django's start-up, before
    the command's own handler) printed a traceback through Django's imports."""
    with pytest.raises(SystemExit) as ended:
        run_manage(monkeypatch, KeyboardInterrupt())

    assert ended.value.code == 130
    assert capsys.readouterr().err == "Interrupted (Ctrl-C).\n"
