"""`run_worker --standby`: a second worker that waits, then takes over from a dead owner.

Real processes over loopback: the owner is SIGKILLed mid-batch, the standby takes the
database's locks within two seconds, runs the wake-up table and finishes the batch,
and Ember's ledger still shows one charge per task.
"""

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from studio.ownership import ADVISORY_KEY, LOCK_LOST
from tests.processes import Simulator, Stack, seed, server_url
from tests.processes import snapshot as tasks_of

TAKEOVER_BOUND = 2.0  # seconds from the owner's death to the standby's pump running
LOSS_BOUND = 5.0  # seconds from the lock's session ending to its worker's exit (a tick is 1 s)
PROVIDERS = [{"provider": "openai", "candidates": 2}, {"provider": "flux", "candidates": 2}]
REFUSED = "Another Avatars worker already owns this database"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulator]:
    # Slow jobs: the owner dies while Ember is still working on every one of them.
    simulator = Simulator(tmp_path / "sim", job_seconds=6)
    yield simulator
    simulator.stop()


class Worker:
    """`run_worker` as a process whose output goes to a file we can watch."""

    def __init__(self, stack: Stack, name: str, *args: str, **env: str) -> None:
        self.log = stack.data_dir.parent / f"{name}.log"
        self.proc = stack.popen(
            sys.executable,
            "manage.py",
            "run_worker",
            *args,
            log=self.log,
            env={"AVATARS_POLL_INTERVAL": "0.2", **env},
        )

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, text: str, timeout: float = 60) -> float:
        """Wait until `text` is in the output; return when it was seen (time.monotonic)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output()}"
            time.sleep(0.02)
        return time.monotonic()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def wait_until(check, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def all_in(stack: Stack, state: str) -> bool:
    return {t["state"] for t in tasks_of(stack)} == {state}


def kill_the_owner_mid_batch_and_take_over(owner_stack: Stack, standby_stack: Stack) -> None:
    """Owner on `owner_stack`, standby on `standby_stack` (one database); see the module."""
    sim = owner_stack.simulator
    workers = [Worker(owner_stack, "owner")]
    try:
        owner = workers[0]
        owner.wait_for("Avatars worker running")
        workers.append(standby := Worker(standby_stack, "standby", "--standby"))
        standby.wait_for("standing by")
        seed(owner_stack, providers=PROVIDERS, frames=["image"])
        # Every task's job is with Ember, none finished: the middle of the batch. (The
        # owner's log says so at once; asking the database takes a process each time.)
        wait_until(lambda: owner.output().count("to=running") == 4, "every job to be sent")
        assert "Avatars worker running" not in standby.output()  # it only waited
        assert "to=copying" not in owner.output()

        owner.proc.send_signal(signal.SIGKILL)
        died = time.monotonic()
        owner.proc.wait(timeout=30)
        # "worker started" is logged once the wake-up table has run, as the pump starts.
        pumping = standby.wait_for("worker started", timeout=30)

        took = pumping - died
        assert took < TAKEOVER_BOUND, f"took over {took:.2f} s after the owner died (bound: 2 s)"
        out = standby.output()
        assert out.index("took over") < out.index("worker started workers=4 recovered=")
        wait_until(lambda: all_in(standby_stack, "done"), "the standby to finish the batch")
    finally:
        for worker in workers:
            worker.stop()

    tasks = tasks_of(standby_stack)
    assert len(tasks) == 4
    assert all(t["on_disk"] and t["released"] is True for t in tasks)
    charges = Counter(sim.get("/_sim/charges")["charges"])
    assert {t["id"]: charges[t["id"]] for t in tasks} == {t["id"]: 1 for t in tasks}
    assert sum(charges.values()) == 4


def test_it_takes_over_within_two_seconds_of_the_owners_death_and_pays_nothing_twice(
    stack: Stack,
):
    kill_the_owner_mid_batch_and_take_over(stack, stack)


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_standby_on_another_machine_takes_over_too(stack: Stack, tmp_path: Path):
    # Another data dir stands for another machine: only the advisory lock is shared.
    elsewhere = Stack(
        tmp_path / "elsewhere", stack.simulator, DATABASE_URL=stack.env["DATABASE_URL"]
    )
    kill_the_owner_mid_batch_and_take_over(stack, elsewhere)


END_THE_LOCKS_SESSION = f"""
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND classid = %s AND objid = %s AND objsubid = 1",
        [{ADVISORY_KEY >> 32}, {ADVISORY_KEY & 0xFFFF_FFFF}],
    )
    result = [ended for (ended,) in cursor.fetchall()]
"""


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_worker_whose_lock_session_is_ended_stops_and_the_standby_finishes(
    stack: Stack, tmp_path: Path
):
    """An operator (or a pooler, or a timeout) ends the session that holds the owner's
    advisory lock while the owner is alive, two jobs with Ember and two tasks queued: the
    owner stops within its tick, the standby on another machine takes over, and Ember's
    ledger shows one charge per task."""
    elsewhere = Stack(
        tmp_path / "elsewhere", stack.simulator, DATABASE_URL=stack.env["DATABASE_URL"]
    )
    workers = [owner := Worker(stack, "owner", AVATARS_WORKERS="2")]
    try:
        owner.wait_for("Avatars worker running")
        workers.append(standby := Worker(elsewhere, "standby", "--standby"))
        standby.wait_for("standing by")
        seed(stack, providers=PROVIDERS, frames=["image"])
        # The machines share the originals (as on network storage): the reference photos.
        shutil.copytree(stack.data_dir / "originals", elsewhere.data_dir / "originals")
        wait_until(lambda: owner.output().count("to=running") == 2, "two jobs to be sent")

        assert stack.django(END_THE_LOCKS_SESSION) == [True], "no session held the lock"
        ended = time.monotonic()
        code = owner.proc.wait(timeout=30)
        stopped = time.monotonic()
        took = stopped - ended

        assert code != 0, owner.output()
        assert LOCK_LOST in owner.output()
        assert took < LOSS_BOUND, f"the owner stopped {took:.2f} s after losing its lock"
        standby.wait_for("worker started", timeout=30)
        wait_until(lambda: all_in(elsewhere, "done"), "the standby to finish the batch")
    finally:
        for worker in workers:
            worker.stop()

    assert owner.output().count("to=submitting") == 2, "the owner started more after its loss"
    tasks = tasks_of(elsewhere)
    assert len(tasks) == 4
    assert all(t["on_disk"] and t["released"] is True for t in tasks)
    charges = Counter(stack.simulator.get("/_sim/charges")["charges"])
    assert {t["id"]: charges[t["id"]] for t in tasks} == {t["id"]: 1 for t in tasks}


HEARTBEAT = """
from studio.models import WorkerHeartbeat
beat = WorkerHeartbeat.objects.filter(pk=1).first()
result = beat and {"pid": beat.pid, "stopped": beat.stopped, "status": WorkerHeartbeat.status()}
"""


@pytest.mark.skipif(not server_url(), reason="PostgreSQL only: runs in `make test-postgres`")
def test_on_postgresql_a_worker_whose_lock_session_is_ended_says_it_stopped(stack: Stack):
    """With no standby to take over, the studio says at once that no worker runs ("worker
    stopped"), not "no worker seen" a quarter of a minute later, as after a crash."""
    owner = Worker(stack, "owner")
    try:
        owner.wait_for("Avatars worker running")
        wait_until(lambda: (stack.django(HEARTBEAT) or {}).get("pid") == owner.proc.pid, "a beat")
        assert stack.django(END_THE_LOCKS_SESSION) == [True], "no session held the lock"
        code = owner.proc.wait(timeout=30)
    finally:
        owner.stop()

    assert code != 0 and LOCK_LOST in owner.output(), owner.output()
    beat = stack.django(HEARTBEAT)
    assert beat["pid"] == owner.proc.pid and beat["stopped"] is True, beat
    assert beat["status"].startswith("worker stopped for "), beat["status"]


def test_without_the_flag_a_second_worker_still_refuses(stack: Stack):
    owner = Worker(stack, "owner")
    try:
        owner.wait_for("Avatars worker running")
        second = stack.run(sys.executable, "manage.py", "run_worker", timeout=60)
    finally:
        assert owner.stop() == 0
    assert second.returncode != 0
    assert REFUSED in second.stdout + second.stderr
    assert "standing by" not in second.stdout + second.stderr


def test_a_standby_stopped_while_it_waits_exits_cleanly_having_run_nothing(stack: Stack):
    owner = Worker(stack, "owner")
    try:
        owner.wait_for("Avatars worker running")
        standby = Worker(stack, "standby", "--standby")
        standby.wait_for("standing by")

        assert standby.stop() == 0
        assert "Stopped while standing by" in standby.output()
        assert "Avatars worker running" not in standby.output()
        assert owner.proc.poll() is None  # the owner is untouched
    finally:
        assert owner.stop() == 0
