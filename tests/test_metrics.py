"""`/metrics`: who may scrape it, and what the figures say (docs/operations.md §Metrics)."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from avatars.bodylimit import BodyLimit
from studio import engine, metrics
from studio.ember.client import EmberBusy, EmberClient, EmberUnavailable
from studio.metrics import forget_dead_processes
from studio.models import Subject, Task, WorkerHeartbeat
from tests.factories import batch_request
from tests.processes import dead_pid

JOBS = "/api/v1/api-generators/jobs"
PAYLOAD: dict[str, Any] = {"kind": "image", "provider": "flux", "prompt": "a portrait"}
Figures = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Client, **extra: Any) -> Figures:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    figures: Figures = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            figures[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return figures


def figure(figures: Figures, name: str, **labels: str) -> float:
    return figures.get((name, frozenset(labels.items())), 0.0)


def tasks_in(subject: Subject, **states: int) -> list[Task]:
    """Plan one batch with a task per state asked for, and move each into its state."""
    total = sum(states.values())
    batch = engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": total}])
    )
    tasks = list(batch.tasks.all())
    names = [state for state, n in states.items() for _ in range(n)]
    for task, state in zip(tasks, names, strict=True):
        due = task.next_attempt_at if state in ("queued", "running", "copying") else None
        Task.objects.filter(pk=task.pk).update(state=state, next_attempt_at=due)
    return tasks


# --- who may scrape ---------------------------------------------------------------------


@pytest.mark.django_db
def test_it_answers_a_loopback_scrape_when_no_token_is_set(client: Client, settings: Any):
    settings.AVATARS_METRICS_TOKEN = ""

    for address in ("127.0.0.1", "::1"):
        response = client.get("/metrics", REMOTE_ADDR=address)

        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b"avatars_tasks" in response.content


@pytest.mark.django_db
def test_it_refuses_a_scrape_from_elsewhere_when_no_token_is_set(client: Client, settings: Any):
    settings.AVATARS_METRICS_TOKEN = ""

    response = client.get("/metrics", REMOTE_ADDR="203.0.113.7")

    assert response.status_code == 403
    assert b"avatars_" not in response.content


@pytest.mark.django_db
def test_it_refuses_a_loopback_request_a_proxy_forwarded(client: Client, settings: Any):
    # A proxy on the same machine makes every visitor look local: its header gives it away.
    settings.AVATARS_METRICS_TOKEN = ""

    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.7")

    assert response.status_code == 403


@pytest.mark.django_db
def test_it_refuses_loopback_without_a_token_behind_a_tls_proxy(client: Client, settings: Any):
    settings.AVATARS_METRICS_TOKEN = ""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")

    assert response.status_code == 403


@pytest.mark.django_db
def test_it_asks_for_the_token_when_one_is_set(client: Client, settings: Any):
    settings.AVATARS_METRICS_TOKEN = "s3cret-scrape-token"

    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": "s3cret"}):
        response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **header)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"avatars_" not in response.content

    answered = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token"
    )
    assert answered.status_code == 200
    assert b"avatars_tasks" in answered.content


@pytest.mark.django_db
def test_it_answers_a_plain_http_scrape_where_pages_redirect_to_https(
    client: Client, settings: Any
):
    settings.SECURE_SSL_REDIRECT = True
    settings.AVATARS_METRICS_TOKEN = ""

    assert client.get("/accounts/login/").status_code == 301
    assert client.get("/metrics").status_code == 200


def test_it_answers_a_post_to_metrics_405_without_reading_its_body():
    sent: list[dict[str, Any]] = []
    read: list[bool] = []

    async def receive() -> dict[str, Any]:
        read.append(True)
        return {"type": "http.request", "body": b"x" * 1000, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the body reached Django")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/metrics",
        "headers": [(b"content-length", b"1000")],
    }
    async_to_sync(BodyLimit(app))(scope, receive, send)

    assert sent[0]["status"] == 405
    assert (b"allow", b"GET, HEAD") in sent[0]["headers"]
    assert read == []


# --- what the figures say ---------------------------------------------------------------


@pytest.mark.django_db
def test_it_counts_tasks_by_state_copies_failed_and_releases_unconfirmed(
    client: Client, subject: Subject
):
    tasks = tasks_in(subject, queued=2, running=1, copy_failed=2, done=1)
    done = next(t for t in Task.objects.filter(state="done"))
    Task.objects.filter(pk=done.pk).update(protection_released=False)

    figures = scrape(client)

    assert len(tasks) == 6
    assert figure(figures, "avatars_tasks", state="queued") == 2
    assert figure(figures, "avatars_tasks", state="running") == 1
    assert figure(figures, "avatars_tasks", state="copy_failed") == 2
    assert figure(figures, "avatars_tasks", state="done") == 1
    # Every state is there, at zero when no task is in it: a graph needs no gaps.
    assert ("avatars_tasks", frozenset({("state", "uncertain")})) in figures
    assert figure(figures, "avatars_copies_failed") == 2
    assert figure(figures, "avatars_releases_unconfirmed") == 1
    assert figure(figures, "avatars_database_up") == 1


@pytest.mark.django_db
def test_it_gives_the_age_of_the_oldest_due_task(client: Client, subject: Subject):
    early, late, later = tasks_in(subject, queued=3)
    now = timezone.now()
    Task.objects.filter(pk=early.pk).update(next_attempt_at=now - timedelta(seconds=90))
    Task.objects.filter(pk=late.pk).update(next_attempt_at=now - timedelta(seconds=10))
    Task.objects.filter(pk=later.pk).update(next_attempt_at=now + timedelta(hours=1))

    age = figure(scrape(client), "avatars_oldest_due_task_age_seconds")

    assert 90 <= age < 100

    Task.objects.filter(pk__in=[early.pk, late.pk]).update(next_attempt_at=now + timedelta(hours=1))
    assert figure(scrape(client), "avatars_oldest_due_task_age_seconds") == 0


@pytest.mark.django_db
def test_it_gives_the_worker_heartbeat_age_once_a_worker_was_seen(client: Client):
    assert not any(name == "avatars_worker_heartbeat_age_seconds" for name, _ in scrape(client))

    WorkerHeartbeat.objects.create(
        started_at=timezone.now() - timedelta(minutes=5),
        seen_at=timezone.now() - timedelta(seconds=42),
        pid=1,
        host="here",
    )

    age = figure(scrape(client), "avatars_worker_heartbeat_age_seconds")
    assert 42 <= age < 50


@pytest.mark.django_db
def test_it_says_when_the_running_worker_cannot_write_its_heartbeat(client: Client):
    """Found by a full-disk review: reads answered (database_up 1), and the worker whose
    every write was refused looked like one stopped."""
    seen = timezone.now() - timedelta(minutes=2)
    WorkerHeartbeat.objects.create(started_at=seen, seen_at=seen, pid=1, host="here")
    assert figure(scrape(client), "avatars_worker_cannot_write") == 0  # gone, its file too

    (settings.AVATARS_DATA_DIR / WorkerHeartbeat.ALIVE_FILE).touch()  # it passes, unheard

    assert figure(scrape(client), "avatars_worker_cannot_write") == 1
    WorkerHeartbeat.objects.update(seen_at=timezone.now())
    assert figure(scrape(client), "avatars_worker_cannot_write") == 0  # its row written again


@pytest.mark.django_db
def test_it_counts_paid_requests_by_provider_and_outcome(client: Client, ember: respx.Router):
    before = scrape(client)
    answers = iter(
        [
            httpx.Response(202, json={"id": "job-1"}),
            httpx.Response(202, json={"id": "job-1"}, headers={"Idempotent-Replayed": "true"}),
            httpx.Response(503, json={}, headers={"Retry-After": "5"}),
        ]
    )
    ember.post(JOBS).mock(side_effect=lambda request: next(answers))
    ember_client = EmberClient()

    async_to_sync(ember_client.submit)(PAYLOAD)
    async_to_sync(ember_client.submit)(PAYLOAD, idempotency_key="k")
    with pytest.raises(EmberBusy):
        async_to_sync(ember_client.submit)(PAYLOAD)

    after = scrape(client)
    name = "avatars_ember_paid_requests_total"
    for outcome in ("accepted", "replayed", "busy"):
        rise = figure(after, name, provider="flux", outcome=outcome) - figure(
            before, name, provider="flux", outcome=outcome
        )
        assert rise == 1, outcome


@pytest.mark.django_db
def test_it_times_ember_requests_by_route_and_status(client: Client, ember: respx.Router):
    before = scrape(client)
    ember.post(JOBS).mock(return_value=httpx.Response(202, json={"id": "job-1"}))
    ember.get(f"{JOBS}/job-1").mock(return_value=httpx.Response(200, json={"status": "queued"}))
    ember_client = EmberClient()

    async_to_sync(ember_client.submit)(PAYLOAD)
    async_to_sync(ember_client.poll)("job-1")
    async_to_sync(ember_client.poll)("job-1")
    ember.get(f"{JOBS}/job-2").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(EmberUnavailable):
        async_to_sync(ember_client.poll)("job-2")

    after = scrape(client)
    name = "avatars_ember_request_duration_seconds_count"
    for route, status, rise in (
        ("submit", "202", 1),
        ("poll", "200", 2),
        ("poll", "unreachable", 1),
    ):
        assert (
            figure(after, name, route=route, status=status)
            - figure(before, name, route=route, status=status)
            == rise
        ), (route, status)
    # No job or image id in a label: one series per route, however many jobs.
    assert not any("job-1" in str(labels) for _, labels in after)


# --- the multiprocess files ---------------------------------------------------------------


def test_it_forgets_the_files_of_dead_processes_only():
    folder = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    assert folder == settings.AVATARS_METRICS_DIR
    dead = dead_pid()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = [folder / f"counter_{dead}.db", folder / f"histogram_{dead}.db"]
    kept = [folder / f"counter_{alive.pid}.db", folder / "notes.txt"]
    try:
        for path in gone + kept:
            path.touch()

        forget_dead_processes()

        assert [p.exists() for p in gone] == [False, False]
        assert all(p.exists() for p in kept)
    finally:
        alive.kill()
        alive.wait()
        for path in kept:
            path.unlink(missing_ok=True)


def test_commands_run_one_after_another_leave_only_the_last_ones_figure_files(tmp_path: Path):
    """Found by a review: every manage.py run left its two files for good (only a worker's
    start forgot them), so a cron's commands grew the folder, and each scrape, without end."""
    folder = tmp_path / "metrics"
    env = {
        **os.environ,
        "AVATARS_DATA_DIR": str(tmp_path / "data"),
        "AVATARS_METRICS_DIR": str(folder),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    seen = []
    for _run in range(4):
        subprocess.run([sys.executable, manage, "check"], env=env, check=True, capture_output=True)
        seen.append(sorted(path.name for path in folder.glob("*.db")))

    assert all(len(names) == 2 for names in seen), f"figure files after each run: {seen}"
    assert len({names[0] for names in seen}) == 4, "each run wrote files of its own"


@pytest.mark.django_db
def test_a_figure_file_left_empty_or_cut_short_does_not_fail_the_scrape(
    client: Client, ember: respx.Router, caplog: pytest.LogCaptureFixture
):
    """A process killed while creating its file leaves it empty; the others are still served."""
    folder = Path(settings.AVATARS_METRICS_DIR)
    ember.post(JOBS).mock(return_value=httpx.Response(202, json={"id": "job-1"}))
    async_to_sync(EmberClient().submit)(PAYLOAD)
    counted = figure(
        scrape(client), "avatars_ember_paid_requests_total", provider="flux", outcome="accepted"
    )
    empty = folder / f"counter_{dead_pid()}.db"
    cut = folder / f"histogram_{os.getpid() + 1_000_000}.db"  # a live-looking pid: not forgotten
    try:
        empty.touch()
        cut.write_bytes((4096).to_bytes(4, "little") + b"\x00" * 20)  # says 4096 bytes, has 24

        figures = scrape(client)

        assert (
            figure(
                figures, "avatars_ember_paid_requests_total", provider="flux", outcome="accepted"
            )
            == counted
            >= 1
        )
        unread = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
        assert any(empty.name in m for m in unread) and any(cut.name in m for m in unread), unread
    finally:
        empty.unlink(missing_ok=True)
        cut.unlink(missing_ok=True)


def test_this_processs_figure_files_have_their_room_on_disk_before_any_figure():
    """Found by a review: grown sparse in memory-mapped files, a figure written on a full disk
    killed the worker with SIGBUS, with no word. Allocated at start, a full disk cannot."""
    folder = Path(settings.AVATARS_METRICS_DIR)
    for kind in metrics.KINDS:
        info = (folder / f"{kind}_{os.getpid()}.db").stat()
        allocated = info.st_blocks * 512
        assert allocated >= metrics.ROOM, (
            f"{kind}: {allocated} of {metrics.ROOM} bytes allocated on disk (the rest is sparse)"
        )


def test_a_full_disk_at_start_up_is_said_in_a_sentence(tmp_path, settings, monkeypatch):
    settings.AVATARS_METRICS_DIR = tmp_path

    def full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics.os, "posix_fallocate", full)

    with pytest.raises(ImproperlyConfigured) as refused:
        metrics.give_room()

    assert str(refused.value) == (
        f"The figures for /metrics cannot be kept in {tmp_path} (No space left on device): "
        "free space on its disk, or set AVATARS_METRICS_DIR to a folder on another disk."
    )


def test_a_read_only_disk_at_start_up_is_said_in_a_sentence(tmp_path, settings, monkeypatch):
    """Found by a review: on a read-only data disk every command died with a traceback,
    deleting the figure files of processes that had ended."""
    settings.AVATARS_METRICS_DIR = tmp_path
    ended = tmp_path / "counter_999999999.db"  # no process has such a pid
    ended.write_bytes(b"")
    real_open = os.open

    def read_only_unlink(self: Path, missing_ok: bool = False) -> None:
        raise OSError(30, "Read-only file system", str(self))

    def read_only_open(path: object, flags: int, *args: object) -> int:
        if flags & os.O_CREAT:
            raise OSError(30, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(Path, "unlink", read_only_unlink)
    monkeypatch.setattr(metrics.os, "open", read_only_open)

    with pytest.raises(ImproperlyConfigured) as refused:
        metrics.give_room()

    assert str(refused.value) == (
        f"The figures for /metrics cannot be kept in {tmp_path} (Read-only file system): "
        "let it be written, or set AVATARS_METRICS_DIR to a folder on another disk."
    )
    assert ended.exists()
