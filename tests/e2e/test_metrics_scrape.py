"""`/metrics` scraped from a running stack: uvicorn, run_worker and the Ember simulator.

The worker's counters are served by the web server: they meet in the metrics folder
of the machine (prometheus_client's multiprocess mode).
"""

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import Stack, Web, dead_pid, seed

TOKEN = "e2e-scrape-token-0123456789"
PROVIDERS = [{"provider": "openai", "candidates": 2}, {"provider": "flux", "candidates": 1}]
FRAMES = ["image", "clip"]
TASKS = 6  # 3 candidates, 2 frames
Figures = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def running(stack: Stack, tmp_path: Path) -> Iterator[tuple[Stack, Web, Path]]:
    """A stack with its web server and worker running, and a file a dead process left."""
    metrics_dir = stack.data_dir / "metrics" / socket.gethostname()
    metrics_dir.mkdir(parents=True, exist_ok=True)
    stale = metrics_dir / f"counter_{dead_pid()}.db"
    stale.touch()
    log = tmp_path / "worker.log"
    worker = stack.popen(
        sys.executable,
        "manage.py",
        "run_worker",
        log=log,
        env={"AVATARS_POLL_INTERVAL": "0.2"},
    )
    web = None
    try:
        deadline = time.monotonic() + 60
        while "Avatars worker running" not in log.read_text():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        web = Web(stack, AVATARS_METRICS_TOKEN=TOKEN)
        yield stack, web, stale
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
        if web is not None:
            web.stop()


def scrape(web: Web) -> Figures:
    response = httpx.get(
        f"{web.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    figures: Figures = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            figures[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return figures


def total(figures: Figures, name: str, **labels: str) -> float:
    """Sum the samples named `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in figures.items() if n == name and wanted <= ls)


def test_it_forgets_the_files_of_dead_processes_when_the_worker_starts(
    running: tuple[Stack, Web, Path],
):
    _stack, web, stale = running

    assert not stale.exists()
    assert scrape(web)  # and what is left reads


def test_it_serves_the_workers_counts_and_the_databases_figures(
    running: tuple[Stack, Web, Path],
):
    stack, web, _stale = running
    assert httpx.get(f"{web.url}/metrics", timeout=30).status_code == 401
    before = scrape(web)

    seed(stack, providers=PROVIDERS, frames=FRAMES)
    deadline = time.monotonic() + 120
    while total(after := scrape(web), "avatars_tasks", state="done") < TASKS:
        assert time.monotonic() < deadline, after
        time.sleep(0.5)

    def rise(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    paid = "avatars_ember_paid_requests_total"
    assert rise(paid) == TASKS
    assert rise(paid, outcome="accepted") == TASKS
    assert rise(paid, provider="openai") == 4 and rise(paid, provider="flux") == 2
    latency = "avatars_ember_request_duration_seconds"
    assert rise(f"{latency}_count", route="submit", status="202") == TASKS
    assert rise(f"{latency}_bucket", route="submit", status="202", le="+Inf") == TASKS
    assert rise(f"{latency}_count", route="fetch", status="200") == TASKS
    assert rise(f"{latency}_count", route="release", status="200") == TASKS
    assert total(after, "avatars_tasks") == TASKS  # every task counted once, in one state
    assert total(after, "avatars_copies_failed") == 0
    assert total(after, "avatars_releases_unconfirmed") == 0
    assert total(after, "avatars_oldest_due_task_age_seconds") == 0
    assert 0 <= total(after, "avatars_worker_heartbeat_age_seconds") < 15
