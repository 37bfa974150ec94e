"""Backup, restore and the originals scrub over real processes (docs/operations.md).

A backup taken while the worker drives a batch, restored into a new data dir, gives a
studio that resumes the jobs by id (nothing is paid twice), whose scrub is clean and
whose every asset opens; `check_originals --repair` fetches a lost original from Ember.
"""

import hashlib
import json
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.processes import (
    Simulator,
    Stack,
    Web,
    create_database,
    database_url,
    seed,
    server_url,
    snapshot,
)

PROVIDERS = [{"provider": "openai", "candidates": 1}, {"provider": "flux", "candidates": 1}]
FRAMES = ["image", "clip"]
JOB_SECONDS = 8.0  # long enough to take a backup while every job runs

ASSETS = """
from studio.models import Asset
result = [[a.pk, a.sha256, a.mime, a.origin] for a in Asset.objects.order_by("pk")]
"""
JOBS = """
from studio.models import Task
result = [[str(t.pk), t.state, t.ember_job_id] for t in Task.objects.all()]
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    simulator = Simulator(tmp_path_factory.mktemp("sim"), job_seconds=0)
    yield simulator
    simulator.stop()


def every_task_with_ember(stack: Stack, count: int) -> list[list[str]]:
    """Wait until every task has a job id (Ember has them all); return (id, state, job)."""
    deadline = time.monotonic() + 60
    while True:
        jobs = stack.django(JOBS)
        if len(jobs) == count and all(job for _id, _state, job in jobs):
            return jobs
        assert time.monotonic() < deadline, jobs
        time.sleep(0.2)


def stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def new_install(data_dir: Path, sim: Simulator) -> Stack:
    """An install with nothing in it yet: a new data dir (and on PostgreSQL a new database)."""
    if not server_url():
        return Stack(data_dir, sim)
    name = f"avatars_{uuid.uuid4().hex[:12]}"
    create_database(name)
    return Stack(data_dir, sim, DATABASE_URL=database_url(name))


def test_a_backup_taken_mid_batch_restores_a_studio_that_finishes_it_paying_once(
    stack: Stack, sim: Simulator, tmp_path: Path
):
    sim.post("/_sim/config", {"job_seconds": JOB_SECONDS})
    web = Web(stack)
    worker = stack.popen(
        sys.executable, "manage.py", "run_worker", log=stack.data_dir / "worker.log"
    )
    try:
        seed(stack, providers=PROVIDERS, frames=FRAMES)
        jobs = every_task_with_ember(stack, 4)
        stack.manage("backup", str(tmp_path / "backup"))
    finally:
        stop(worker)
        web.stop()

    restored = new_install(tmp_path / "restored", sim)
    restored.manage("restore", str(tmp_path / "backup"))
    restored.manage("migrate", "--verbosity", "0")
    # The backup caught the batch in flight: jobs with Ember, not yet copied.
    assert "running" in {state for _id, state, _job in restored.django(JOBS)}
    restored.manage("run_worker", "--once")

    tasks = snapshot(restored)
    assert {t["state"] for t in tasks} == {"done"}
    assert all(t["on_disk"] for t in tasks)
    assert sorted([t[0], t[2]] for t in restored.django(JOBS)) == sorted(
        [task_id, job] for task_id, _state, job in jobs
    )  # resumed by id
    paid = Counter(sim.get("/_sim/charges")["charges"])
    assert paid == {t["id"]: 1 for t in tasks}
    scrubbed = restored.manage("check_originals")
    assert scrubbed.splitlines()[-1] == (
        "Checked 6 originals: all present and matching their hashes."
    )
    assert every_asset_opens(restored) == 6


A_SEARCH_LATER = """
from datetime import timedelta
from django.conf import settings
from django.utils import timezone
from studio.models import Attempt, Task
later = timezone.now() - timedelta(seconds=settings.AVATARS_ADOPT_EVERY + 1)
Attempt.objects.filter(task__state="uncertain").update(submitted_at=later)
result = Task.objects.filter(state="uncertain").update(submitted_at=later)
"""


def test_tasks_waiting_in_a_backup_that_the_lost_install_sent_are_not_paid_again(
    stack: Stack, sim: Simulator, tmp_path: Path
):
    """Found by a review: a restore re-sent every task the backup held as queued, although
    the install it replaced had sent (and paid for) them after the backup."""
    sim.post("/_sim/config", {"job_seconds": 0})
    seed(stack, providers=PROVIDERS, frames=FRAMES)
    stack.manage("backup", str(tmp_path / "backup"))  # every task still waiting to be sent
    manifest = tmp_path / "backup" / "manifest.json"
    listed = json.loads(manifest.read_text())
    listed["created_at"] = "2026-01-01T00:00:00+00:00"  # an old backup: no search is due sooner
    manifest.write_text(json.dumps(listed))
    stack.manage("run_worker", "--once")  # the install that is then lost sends them all
    paid_before = Counter(sim.get("/_sim/charges")["charges"])
    assert sorted(paid_before.values()) == [1, 1, 1, 1]

    restored = new_install(tmp_path / "restored", sim)
    said = restored.manage("restore", str(tmp_path / "backup"))
    restored.manage("migrate", "--verbosity", "0")
    held = {state for _id, state, _job in restored.django(JOBS)}
    # A held-back image is first looked up in Ember's history AVATARS_ADOPT_EVERY after
    # the restore (the lost install may have sent it just before): as if that long passed.
    restored.django(A_SEARCH_LATER)
    restored.manage("run_worker", "--once")

    tasks = snapshot(restored)
    assert {t["state"] for t in tasks} == {"done"}, tasks
    assert Counter(sim.get("/_sim/charges")["charges"]) == paid_before
    assert held == {"uncertain", "queued"}  # the images held back; the clips keep their keys
    assert "Held back 2 task(s)" in said


def every_asset_opens(stack: Stack) -> int:
    """Fetch every asset's original through the API; return how many matched their hash."""
    token = stack.manage("api_token", "auditor", "--create-user").strip().splitlines()[-1]
    web = Web(stack)
    try:
        opened = 0
        for pk, sha256, _mime, _origin in stack.django(ASSETS):
            answer = httpx.get(
                f"{web.url}/api/v1/assets/{pk}/original",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            assert hashlib.sha256(answer.content).hexdigest() == sha256
            opened += 1
        return opened
    finally:
        web.stop()


def test_the_scrub_fetches_a_lost_original_from_the_simulator_until_ember_deletes_it(
    stack: Stack, sim: Simulator
):
    seed(stack, providers=[{"provider": "openai", "candidates": 2}], frames=["image"])
    stack.manage("run_worker", "--once")
    generated = [a for a in stack.django(ASSETS) if a[3] == "generated"]
    lost, flipped = (stack.data_dir / "originals" / f"{a[1]}.png" for a in generated)
    lost.unlink()
    flipped.write_bytes(flipped.read_bytes()[::-1])

    repaired = stack.run(sys.executable, "manage.py", "check_originals", "--repair")

    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert repaired.stdout.splitlines()[-1] == (
        "Checked 4 originals: 1 missing, 1 corrupt; repaired 2."
    )
    assert hashlib.sha256(lost.read_bytes()).hexdigest() == generated[0][1]
    assert hashlib.sha256(flipped.read_bytes()).hexdigest() == generated[1][1]

    # Released after the copy, so Ember's retention pass may delete it: then nothing helps.
    sim.post("/_sim/cleanup", {"source_app": "cwkAvatars"})
    lost.unlink()
    gone = stack.run(sys.executable, "manage.py", "check_originals", "--repair")

    assert gone.returncode == 1
    assert f"not repaired: {lost.name} (Ember no longer has image" in gone.stdout
    assert not lost.exists()
    assert sum(Counter(sim.get("/_sim/charges")["charges"]).values()) == 2
