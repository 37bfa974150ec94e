"""Goal: the pages stay quick while the worker runs at full speed.

One install served by uvicorn. Sixteen clients, each in a thread of this
process, fetch a batch's live-progress fragment (signed in) and
`GET /api/v1/batches/{id}` (with a token) in turn, first with the worker idle,
then while a worker process drives 1,000 tasks against the real simulator as
fast as it can (jobs take no time). The row compares the 95th percentile of the
two; any 5xx, or "database is locked" in the web server's log, fails it.
Runs on SQLite; `make bench-postgres` (DATABASE_URL set) adds the same row on
PostgreSQL (`bench.loaded_postgres`).
"""

import threading
import time
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


def run(ctx: Context, *, database_url: str = "") -> Result:
    tasks = ctx.size(1_000, 400)
    window = float(ctx.size(20, 8))  # seconds of client load in each phase
    kind = "PostgreSQL" if database_url else "SQLite"
    name = f"loaded-{kind.lower()}"
    data_dir = ctx.tmp / name
    env = {"DATABASE_URL": database_url} if database_url else {}
    ctx.log(f"loaded ({kind}): {CLIENTS} clients, {window:.0f} s idle then {window:.0f} s busy")
    with SimProcess(ctx, name=f"{name}-sim", job_seconds=0) as sim:
        owner = Child(ctx, name, __name__, data_dir=data_dir, EMBER_URL=sim.url, **env)
        try:
            setup = owner.call("setup", tasks=tasks)
            with WebProcess(ctx, data_dir, name=f"{name}-web", **env) as web:
                idle = _load(web.url, setup, window)
                owner.send("drive")
                busy = _load(web.url, setup, window)
                done = owner.receive()
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
    busy_throughout = done["seconds"] >= busy["window"]
    return Result(
        goal=f"pages under worker load ({kind})",
        measured=ratio,
        unit="x",
        target=f"p95 ≤ {TARGET}x idle; 0 5xx; 0 locked",
        passed=ratio <= TARGET and errors == 0 and locked == 0 and busy_throughout,
        raw=(
            f"p95 {p95_busy * 1e3:.0f} ms busy vs {p95_idle * 1e3:.0f} ms idle "
            f"({len(busy['times'])} vs {len(idle['times'])} requests, {CLIENTS} clients); "
            f"{errors} 5xx, {locked} '{LOCKED}'; the worker finished {done['done']} of {tasks} "
            f"tasks in {done['seconds']:.1f} s"
        ),
        notes=[]
        if busy_throughout
        else ["WARNING: the worker finished before the busy window ended; raise the task count"],
    )


def _load(url: str, setup: dict[str, Any], window: float) -> dict[str, Any]:
    """Run the clients for `window` seconds; return every request's time and the 5xx count."""
    times: list[float] = []
    failures = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + window

    def client(index: int) -> None:
        batch = setup["batches"][index % len(setup["batches"])]
        routes = [
            (f"{url}/batches/{batch}/progress/", {"Cookie": f"sessionid={setup['session']}"}),
            (f"{url}/api/v1/batches/{batch}", {"Authorization": f"Bearer {setup['token']}"}),
        ]
        with httpx.Client(timeout=30) as http:
            n = 0
            while time.monotonic() < stop_at:
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
    return {"times": times, "5xx": failures[0], "window": window}


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
