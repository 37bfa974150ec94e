"""Goal: the pages stay quick while the worker runs at full speed.

One install served by uvicorn. Sixteen clients, each in a thread of this
process, fetch a batch's live-progress fragment (signed in) and
`GET /api/v1/batches/{id}` (with a token) in turn, first with the worker idle,
then while a worker process drives 1,000 tasks against the real simulator as
fast as it can (jobs take no time). The idle phase lasts a fixed window; the busy
one exactly as long as the worker runs (a quick machine drives the tasks in less than
the window, and requests after its end would be idle ones). The row compares the 95th
percentile of the two; any 5xx, "database is locked" in the web server's log, or too
few requests while the worker ran for a 95th percentile, fails it.
Runs on SQLite; `make bench-postgres` (DATABASE_URL set) adds the same row on
PostgreSQL (`bench.loaded_postgres`).
"""

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from bench import data
from bench.common import Child, Context, Result, SimProcess, WebProcess, percentile
from studio.api.auth import issue_token
from studio.models import Task, TaskState
from studio.worker import Worker

TARGET = 2.0
CLIENTS = 16
POLL_INTERVAL = 0.05  # seconds; Ember answers at once here
LOCKED = "database is locked"
FEWEST = 200  # requests while the worker runs: fewer say little about a 95th percentile


def run(ctx: Context, *, database_url: str = "") -> Result:
    tasks = ctx.size(1_000, 400)
    window = float(ctx.size(20, 8))  # seconds of client load with the worker idle
    kind = "PostgreSQL" if database_url else "SQLite"
    name = f"loaded-{kind.lower()}"
    data_dir = ctx.tmp / name
    env = {"DATABASE_URL": database_url} if database_url else {}
    ctx.log(f"loaded ({kind}): {CLIENTS} clients, {window:.0f} s idle, then while {tasks} run")
    with SimProcess(ctx, name=f"{name}-sim", job_seconds=0) as sim:
        owner = Child(ctx, name, __name__, data_dir=data_dir, EMBER_URL=sim.url, **env)
        try:
            setup = owner.call("setup", tasks=tasks)
            with WebProcess(ctx, data_dir, name=f"{name}-web", **env) as web:
                deadline = time.monotonic() + window
                idle = _load(web.url, setup, lambda: time.monotonic() >= deadline)
                done = _while_driving(owner, lambda stop: _load(web.url, setup, stop))
                busy = done.pop("load")
            log = (ctx.tmp / f"{name}-web.log").read_text(errors="replace")
        finally:
            owner.close()
    return _result(kind, idle, busy, done, tasks, locked=log.count(LOCKED))


def _result(
    kind: str,
    idle: dict[str, Any],
    busy: dict[str, Any],
    done: dict[str, Any],
    tasks: int,
    *,
    locked: int,
) -> Result:
    p95_idle = percentile(idle["times"], 0.95)
    p95_busy = percentile(busy["times"], 0.95)
    ratio = p95_busy / p95_idle
    errors = idle["5xx"] + busy["5xx"]
    enough = len(busy["times"]) >= FEWEST
    return Result(
        goal=f"pages under worker load ({kind})",
        measured=ratio,
        unit="x",
        target=f"p95 ≤ {TARGET}x idle; 0 5xx; 0 locked",
        passed=ratio <= TARGET and errors == 0 and locked == 0 and enough,
        raw=(
            f"p95 {p95_busy * 1e3:.0f} ms busy vs {p95_idle * 1e3:.0f} ms idle "
            f"({len(busy['times'])} requests in {busy['seconds']:.1f} s vs "
            f"{len(idle['times'])} in {idle['seconds']:.1f} s, {CLIENTS} clients); "
            f"{errors} 5xx, {locked} '{LOCKED}'; the worker finished {done['done']} of {tasks} "
            f"tasks in {done['seconds']:.1f} s"
        ),
        notes=[]
        if enough
        else [f"WARNING: fewer than {FEWEST} requests while the worker ran; raise the task count"],
    )


def _while_driving(
    owner: Child, load: Callable[[Callable[[], bool]], dict[str, Any]]
) -> dict[str, Any]:
    """Have the owner drive its tasks while `load` runs, until the worker is done.

    Return the owner's answer, with what `load` returned under "load".
    """
    finished = threading.Event()
    answer: dict[str, Any] = {}

    def wait() -> None:
        try:
            answer["done"] = owner.receive()
        except BaseException as exc:  # re-raised below, once the clients stopped
            answer["error"] = exc
        finally:
            finished.set()

    owner.send("drive")
    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        result = load(finished.is_set)
    finally:
        waiter.join()
    if "error" in answer:
        raise answer["error"]
    return {**answer["done"], "load": result}


def _load(url: str, setup: dict[str, Any], stop: Callable[[], bool]) -> dict[str, Any]:
    """Run the clients until `stop()` says so; return every request's time and the 5xx count."""
    times: list[float] = []
    failures = [0]
    lock = threading.Lock()
    began = time.monotonic()

    def client(index: int) -> None:
        batch = setup["batches"][index % len(setup["batches"])]
        routes = [
            (f"{url}/batches/{batch}/progress/", {"Cookie": f"sessionid={setup['session']}"}),
            (f"{url}/api/v1/batches/{batch}", {"Authorization": f"Bearer {setup['token']}"}),
        ]
        with httpx.Client(timeout=30) as http:
            n = 0
            while not stop():
                route, headers = routes[n % 2]
                started = time.perf_counter()
                answer = http.get(route, headers=headers)
                seconds = time.perf_counter() - started
                with lock:
                    times.append(seconds)
                    failures[0] += answer.status_code >= 500
                if answer.status_code >= 400 and answer.status_code < 500:
                    raise RuntimeError(f"{route} answered {answer.status_code}")
                n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"times": times, "5xx": failures[0], "seconds": time.monotonic() - began}


# --- in the child -------------------------------------------------------------


def op_setup(tasks: int) -> dict[str, Any]:
    """Migrate, plan `tasks` image tasks; return batch ids, a session and an API token."""
    data.migrate()
    subject = data.subject_with_reference()
    batches = [str(batch.pk) for batch in data.plan(tasks, subject)]
    user = User.objects.create_user(username="watcher", password=None)
    browser = Client()
    browser.force_login(user)
    return {
        "batches": batches,
        "session": browser.cookies[settings.SESSION_COOKIE_NAME].value,
        "token": issue_token(user=user, read_only=True),
    }


def op_drive() -> dict[str, Any]:
    """Run the worker until every task is done; return how long it took."""
    started = time.perf_counter()
    data.run_once(Worker(poll_interval=POLL_INTERVAL))
    done = Task.objects.filter(state=TaskState.DONE).count()
    return {"done": done, "seconds": time.perf_counter() - started}
