"""`manage.py run_worker` as a process starts it: the interpreter set for the worker's threads."""

import io
import sys

import pytest
from django.core.management import CommandError, call_command

from studio.worker.loop import SWITCH_INTERVAL
from tests.processes import run_snippet
from tests.sqlite_errors import sqlite_error

# The worker's database thread runs on its own connection: real commits, no test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_worker_hands_the_interpreter_between_its_threads_every_half_millisecond(
    monkeypatch,
):
    asked: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", asked.append)  # the test process keeps its own
    out = io.StringIO()

    call_command("run_worker", "--once", stdout=out)

    assert asked == [SWITCH_INTERVAL] and SWITCH_INTERVAL == 0.0005, asked
    assert "Avatars worker running" in out.getvalue()


STOPPED_AS_IT_STARTS = """
import os, signal, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from studio.management.commands import run_worker
checked = run_worker.require_migrated

def stopped_as_it_starts():  # a service manager's stop in the worker's first second
    checked()
    os.kill(os.getpid(), signal.SIGTERM)

run_worker.require_migrated = stopped_as_it_starts
call_command("run_worker", *sys.argv[1:])  # without --once: it would run until stopped
print("exited")
"""


@pytest.mark.parametrize("standby", [False, True], ids=["owner", "standby"])
def test_a_sigterm_while_it_starts_stops_it_with_a_sentence_and_exit_0(tmp_path, standby):
    """Found by a review's kills: a SIGTERM in the worker's first second ended it with -15,
    which a service manager logs as a crash, before its stop handler was installed."""
    flags = ["--standby"] if standby else []
    # On its own SQLite file in either suite: what is tested is the signal, not the database.
    done = run_snippet(STOPPED_AS_IT_STARTS, *flags, data_dir=tmp_path / "data", DATABASE_URL="")

    said = (
        "Stopped while standing by: this worker never owned the database."
        if standby
        else "Stopped while starting: nothing was sent to Ember."
    )
    assert done.stdout.splitlines()[-2:] == [said, "exited"], done.stdout + done.stderr


# As a service manager's stop during Django's own start-up: the SIGTERM comes as Django is
# first imported, from manage.py, before any command has a handler of its own.
STOPPED_IN_DJANGOS_START_UP = """
import os, runpy, signal, sys

class StopAtDjango:
    def find_spec(self, name, path=None, target=None):
        if name == "django":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, StopAtDjango())
sys.argv = ["manage.py", *sys.argv[1:]]
try:
    runpy.run_path("manage.py", run_name="__main__")
except SystemExit as exc:
    print(f"exit {exc.code}")
else:
    print("exit 0")
"""


@pytest.mark.parametrize(
    ("command", "said", "code"),
    [
        (["run_worker"], "Stopped while starting: nothing was sent to Ember.", "exit 0"),
        (["backup", "{tmp}/backup"], "The backup stopped: it was stopped (SIGTERM).", "exit 1"),
    ],
    ids=["run_worker", "backup"],
)
def test_a_sigterm_during_djangos_start_up_is_noted_not_a_crash(tmp_path, command, said, code):
    """Found by a review: a SIGTERM in a worker's first half second ended it with -15 (a
    crash to a service manager): its handler came only once Django had started."""
    data = tmp_path / "data"
    run_snippet(
        "import django; django.setup(); from django.core.management import "
        "call_command; call_command('migrate', verbosity=0)",
        data_dir=data,
        DATABASE_URL="",
    )
    argv = [part.format(tmp=tmp_path) for part in command]

    done = run_snippet(STOPPED_IN_DJANGOS_START_UP, *argv, data_dir=data, DATABASE_URL="")

    output = done.stdout + done.stderr
    assert said in output, output
    assert done.stdout.splitlines()[-1] == code, output
    assert not (tmp_path / "backup" / "manifest.json").exists()


def test_once_gives_up_with_a_sentence_when_the_database_keeps_refusing_it(monkeypatch, tmp_path):
    """Found by a review: `run_worker --once` on a read-only database retried for ever (a
    run from cron never ended, and the next ones piled up behind it)."""
    from studio.worker import loop

    refused = sqlite_error(tmp_path, "read-only")
    tries: list[int] = []

    def beat(*_args: object) -> None:
        tries.append(1)
        raise refused

    async def no_wait(self: object, seconds: float) -> None:
        return None

    monkeypatch.setattr(loop, "_beat", beat)
    monkeypatch.setattr(loop.Worker, "_sleep", no_wait)  # the back-off's waits, skipped

    with pytest.raises(CommandError) as refusal:
        call_command("run_worker", "--once", stdout=io.StringIO())

    assert len(tries) == loop.ONCE_DB_TRIES == 8, tries
    assert str(refusal.value) == (
        f"The database refused the worker 8 times in a row ({refused}): --once stopped "
        "before the tasks reached a resting point. Nothing is lost; the next run goes on."
    )
