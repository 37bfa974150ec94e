"""Concurrent load on SQLite: the worker and several API clients write at once (bounded).

While the worker drives a few hundred tasks through the simulator, client threads
create batches, cancel tasks and read batches through the JSON API. Every answer must
be meaningful (no 5xx, no "database is locked"), every cancel must either win (and
then Ember was never paid for that task) or be refused, and every task must end in
exactly one final state.
"""

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import png_bytes
from tests.processes import Simulator, Stack, free_port, simulator, wait_for_http

CLIENTS = 4
BATCHES_PER_CLIENT = 5
TASKS_PER_BATCH = 15  # 3 providers x 5 candidates: 300 tasks in all
DEADLINE = 240.0  # seconds for everything to come to rest


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulator]:
    # Verbose: every request the simulator answered is in its log, kept for a failure.
    with simulator(tmp_path / "sim", job_seconds=0.2, verbose=True) as running:
        yield running


def serve(stack: Stack, port: int):
    logs = stack.data_dir
    web = stack.serve_web(port, log=logs / "web.log")
    worker = stack.popen(
        sys.executable, "manage.py", "run_worker", "--workers", "16", log=logs / "worker.log"
    )
    return web, worker


class Client(threading.Thread):
    """One API user: plans batches, cancels some tasks at random, reads as it goes."""

    def __init__(self, base: str, token: str, subject: str, seed: int) -> None:
        super().__init__()
        self.http = httpx.Client(
            base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        self.subject = subject
        self.rng = random.Random(seed)
        self.batches: list[str] = []
        self.cancel_won: set[str] = set()
        self.cancel_refused: set[str] = set()
        self.bad: list[str] = []

    def check(self, response: httpx.Response, *ok: int) -> httpx.Response:
        if response.status_code not in ok:
            self.bad.append(
                f"{response.request.method} {response.request.url}: "
                f"{response.status_code} {response.text[:200]}"
            )
        return response

    def run(self) -> None:
        try:
            for _ in range(BATCHES_PER_CLIENT):
                batch = self.check(
                    self.http.post(
                        "/batches",
                        json={
                            "prompt": "a friendly portrait",
                            "subjects": [self.subject],
                            "providers": [
                                {"provider": p, "candidates": 5}
                                for p in ("openai", "flux", "google")
                            ],
                        },
                    ),
                    202,
                ).json()
                self.batches.append(batch["id"])
                for task in self.rng.sample(batch["tasks"], 4):
                    answer = self.check(self.http.post(f"/tasks/{task['id']}/cancel"), 200, 409)
                    if answer.status_code == 200:
                        assert answer.json()["state"] == "cancelled"
                        self.cancel_won.add(task["id"])
                    else:
                        self.cancel_refused.add(task["id"])
                self.check(self.http.get(f"/batches/{batch['id']}"), 200)
                self.check(self.http.get("/subjects"), 200)
        except Exception as exc:
            self.bad.append(repr(exc))


def test_concurrent_clients_and_the_worker_lose_and_double_nothing(stack: Stack):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    token = stack.manage("api_token", "loader", "--create-user").strip().splitlines()[-1]
    stack.env["AVATARS_POLL_INTERVAL"] = "0.3"
    web, worker = serve(stack, port)
    try:
        wait_for_http(base)
        clients = run_clients(base, token)
        assert all(not c.is_alive() for c in clients)
        assert [bad for c in clients for bad in c.bad] == []
        batch_ids = [b for c in clients for b in c.batches]
        assert len(batch_ids) == CLIENTS * BATCHES_PER_CLIENT
        tasks = tasks_at_rest(base, token, batch_ids)
    finally:
        worker.terminate()
        web.terminate()
        worker.wait(timeout=60)
        web.wait(timeout=60)
        worker_out = (stack.data_dir / "worker.log").read_text()
        web_out = (stack.data_dir / "web.log").read_text()

    resting = Counter(t["state"] for t in tasks)
    astray = [
        (t["id"], t["state"], t["phase"], t["error"])
        for t in tasks
        if t["state"] not in ("done", "cancelled")
    ]
    assert set(resting) <= {"done", "cancelled"}, f"{resting}\n{astray}\n{worker_out[-5000:]}"
    assert len(tasks) == CLIENTS * BATCHES_PER_CLIENT * TASKS_PER_BATCH
    won = set().union(*(c.cancel_won for c in clients))
    refused = set().union(*(c.cancel_refused for c in clients))
    charges = stack.simulator.get("/_sim/charges")["charges"]
    for task in tasks:
        if task["id"] in won:
            # A cancel that won means nothing was ever sent: Ember charged nothing.
            assert task["state"] == "cancelled" and task["id"] not in charges, task
        else:
            assert task["state"] == "done" and charges.get(task["id"]) == 1, task
        if task["id"] in refused:
            assert task["state"] == "done", task
    assert sum(charges.values()) == len(tasks) - len(won)
    for log in (worker_out, web_out):
        assert "database is locked" not in log
        assert "Traceback" not in log


def run_clients(base: str, token: str) -> list[Client]:
    """Give the API a subject with a photo, then run every client to its end."""
    auth = {"Authorization": f"Bearer {token}"}
    subject = httpx.post(f"{base}/api/v1/subjects", json={"name": "Ada"}, headers=auth).json()
    photo = httpx.post(
        f"{base}/api/v1/subjects/{subject['id']}/references",
        files={"file": ("ada.png", png_bytes(7), "image/png")},
        headers=auth,
    )
    assert photo.status_code == 201, photo.text
    clients = [Client(base, token, subject["id"], seed) for seed in range(CLIENTS)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(timeout=DEADLINE)
    return clients


def tasks_at_rest(base: str, token: str, batch_ids: list[str]) -> list[dict[str, Any]]:
    """Return the batches' tasks once each is done or cancelled (or when the deadline passes)."""
    auth = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + DEADLINE
    while True:
        tasks = [
            t
            for b in batch_ids
            for t in httpx.get(f"{base}/api/v1/batches/{b}", headers=auth).json()["tasks"]
        ]
        if all(t["state"] in ("done", "cancelled") for t in tasks) or time.monotonic() > deadline:
            return tasks
        time.sleep(1)
