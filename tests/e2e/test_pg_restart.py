"""The worker outlives its database: a real PostgreSQL server restarted under a running worker.

The test starts a throwaway cluster of its own (scripts/pg.sh, another directory and
port), so the cluster the suite may run against is never touched.
"""

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.processes import ROOT, Simulator, Stack, Web, free_port, seed, simulator

# The newest version's binaries, as scripts/pg.sh picks them.
SERVERS = sorted(
    glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(Path(path).parts[-3])
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not SERVERS,
        reason="needs the PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb); "
        "CI installs them",
    ),
]

PASSWORD = "a long enough password"

STATES = (
    "from studio.models import Task\nresult = sorted(Task.objects.values_list('state', flat=True))"
)


@dataclass
class Cluster:
    directory: Path
    url: str

    def restart(self) -> None:
        """Restart the server the way an operator would (`pg_ctl restart -m fast`)."""
        pg_ctl = str(Path(SERVERS[-1]).parent / "pg_ctl")
        data = str(self.directory / "data")
        log = str(self.directory / "server.log")
        command = [pg_ctl, "-D", data, "-l", log, "-m", "fast", "-w", "restart"]
        if os.geteuid() == 0:  # the server refuses to run as root, as in scripts/pg.sh
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=120)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # Not under pytest's tmp_path: when run as root, the postgres user must reach it.
    directory = Path(tempfile.mkdtemp(prefix="avatars-pg-restart-"))
    env = {**os.environ, "AVATARS_PG_DIR": str(directory), "AVATARS_PG_PORT": str(free_port())}

    def pg(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scripts/pg.sh", command], cwd=ROOT, env=env, capture_output=True, text=True
        )

    started = pg("start")
    assert started.returncode == 0, started.stderr
    try:
        yield Cluster(directory, started.stdout.strip())
    finally:
        pg("stop")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulator]:
    # Jobs take seconds, so the restart falls while Ember is still generating.
    with simulator(tmp_path / "sim", job_seconds=5) as running:
        yield running


def wait_for(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_worker_outlives_a_postgresql_restart_and_finishes_the_batch(
    cluster: Cluster, sim: Simulator, tmp_path: Path
):
    worker = None
    try:
        stack = Stack(tmp_path / "install", sim, DATABASE_URL=cluster.url)
        stack.manage("migrate", "--verbosity", "0")
        seed(stack, providers=[{"provider": "openai", "candidates": 2}], frames=["image"])
        log = tmp_path / "worker.log"
        worker = stack.popen(sys.executable, "manage.py", "run_worker", log=log)
        wait_for(lambda: stack.django(STATES) == ["running", "running"], "both jobs sent")

        cluster.restart()  # while Ember is still generating

        wait_for(lambda: stack.django(STATES) == ["done", "done"], "the batch to finish")
        assert worker.poll() is None, log.read_text()  # it waited the restart out
        charges = sim.get("/_sim/charges")
        assert charges["total"] == 2
        assert sorted(charges["charges"].values()) == [1, 1]  # one charge per task
        assert "database server restarted; taking the worker's lock again" in log.read_text()
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
    assert worker.returncode == 0, log.read_text()


def sign_in(browser: httpx.Client) -> None:
    page = browser.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    data = {"username": "ada", "password": PASSWORD, "csrfmiddlewaretoken": token[1]}
    answer = browser.post("/accounts/login/", data=data)
    assert answer.status_code == 302, answer.text[:500]


def add_subject(browser: httpx.Client, name: str) -> int:
    page = browser.get("/subjects/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    answer = browser.post("/subjects/", data={"name": name, "csrfmiddlewaretoken": token[1]})
    return answer.status_code


def test_the_web_answers_requests_with_a_body_after_a_postgresql_restart(
    cluster: Cluster, sim: Simulator, tmp_path: Path
):
    """Found by a review: the body's guard looks up the token and the session before Django's
    request starts, on a thread whose connection nothing closed, so after a restart every
    request with a body answered 500 until the web process was restarted."""
    stack = Stack(tmp_path / "install", sim, DATABASE_URL=cluster.url)
    stack.manage("migrate", "--verbosity", "0")
    stack.django(
        f"from django.contrib.auth.models import User\nresult = User.objects."
        f"create_user('ada', password={PASSWORD!r}).pk"
    )
    token = stack.manage("api_token", "script", "--create-user").strip().splitlines()[-1]
    web = Web(stack)
    api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"})
    browser = httpx.Client(base_url=web.url, headers={"Referer": f"{web.url}/subjects/"})
    try:
        sign_in(browser)
        before = [api.post("/api/v1/subjects", json={"name": "Ada"}).status_code]
        before.append(add_subject(browser, "Bo"))
        assert before == [201, 302], before

        cluster.restart()

        after = []
        for n in range(3):  # not only the first: every later request too
            after.append(api.post("/api/v1/subjects", json={"name": f"Cy {n}"}).status_code)
            after.append(add_subject(browser, f"Dee {n}"))
        assert after == [201, 302] * 3, (
            f"{after}: {(stack.data_dir / 'web.log').read_text()[-3000:]}"
        )
    finally:
        api.close()
        browser.close()
        web.stop()
