"""The figures processes add to, for Prometheus (docs/operations.md §Metrics).

Counters and histograms live in prometheus_client's multiprocess mode: each process
(every web server, the worker) writes its own file in `settings.AVATARS_METRICS_DIR`,
and a scrape of `/metrics` sums them, so the worker's counts are served by the web
server. Figures the database already knows are read at scrape time instead
(`studio.web.metrics`).
"""

import contextlib
import errno
import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import Counter, Histogram, values

if not getattr(values.ValueClass, "_multiprocess", False):
    # Without it each process would count alone, and the worker's figures never be served.
    raise ImproperlyConfigured(
        "prometheus_client was imported before the settings set PROMETHEUS_MULTIPROC_DIR: "
        "load Django's settings first."
    )

# The commands whose figures /metrics serves: a web server's and the worker's. Any other
# `manage.py` command (backup, check_originals, reconcile, restore...) counts alone when its
# files cannot be made, rather than refuse to start: an operator reaches for them on a
# full or read-only disk (a review found every one of them refused there).
SERVED_COMMANDS = frozenset({"run_worker", "demo", "runserver"})
KINDS = ("counter", "histogram")  # the figure files of one process: `<kind>_<pid>.db`
ROOM = 1 << 18  # bytes each is given on disk at start-up: over a thousand labelled figures


def forget_dead_processes() -> list[Path]:
    """Delete the figure files of processes no longer alive on this machine; return them.

    A file is named `<kind>_<pid>.db`. A dead process's counts would otherwise be
    summed forever, and a new process given its pid would carry them on; dropping
    them is a counter reset, which Prometheus' rate() expects after a restart.
    """
    removed = []
    for path in Path(settings.AVATARS_METRICS_DIR).glob("*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue  # a read-only disk: kept, and summed (give_room says why next)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def give_room() -> None:
    """Allocate this process's figure files on disk before prometheus_client writes them.

    prometheus_client maps each file into memory and lets it grow sparse: on a full disk
    the first write to a page not yet on disk killed the process with SIGBUS, with no
    word (found by a review that filled the worker's disk). Allocated here, a full disk
    is an error at start-up that says so, and a later one cannot touch these files.
    The files of processes that have ended go first: every command an operator or cron
    runs leaves its two (a review counted them growing by two a run).
    """
    forget_dead_processes()
    folder = Path(settings.AVATARS_METRICS_DIR)
    for kind in KINDS:
        try:
            room(folder / f"{kind}_{os.getpid()}.db")
        except OSError as exc:
            # A read-only disk too: every command died on it with a traceback (a review).
            fix = "free space on its disk" if exc.errno == errno.ENOSPC else "let it be written"
            said = f"The figures for /metrics cannot be kept in {folder} ({exc.strerror})"
            if served(sys.argv):
                raise ImproperlyConfigured(
                    f"{said}: {fix}, or set AVATARS_METRICS_DIR to a folder on another disk."
                ) from None
            count_alone(folder, said)
            return


def served(argv: list[str]) -> bool:
    """Whether /metrics serves the figures of the process run as `argv`.

    Anything but a `manage.py` command (uvicorn, a test run) is taken as served.
    """
    if Path(argv[0]).name != "manage.py" or len(argv) < 2:
        return True
    return argv[1] in SERVED_COMMANDS


def count_alone(folder: Path, said: str) -> None:
    """Let this process's figures live in its memory only, and say so on stderr."""
    values.ValueClass = values.MutexValue
    for kind in KINDS:  # one made before the other failed would be named unreadable
        with contextlib.suppress(OSError):
            (folder / f"{kind}_{os.getpid()}.db").unlink(missing_ok=True)
    print(f"{said}: this command's figures are not kept for /metrics.", file=sys.stderr)


def room(path: Path) -> None:
    """Make `path` and allocate its ROOM on disk."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < ROOM:
            os.posix_fallocate(fd, 0, ROOM)
    finally:
        os.close(fd)


give_room()

# Seconds. Ember answers JSON in milliseconds, but an original may take a minute to fetch.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

PAID_REQUESTS = Counter(
    "avatars_ember_paid_requests",
    "Submits to Ember's job door (each may start a paid generation), by provider and outcome.",
    ["provider", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "avatars_ember_request_duration_seconds",
    "Time from sending a request to Ember to its answer read in full, by route and status.",
    ["route", "status"],
    buckets=LATENCY_BUCKETS,
)


def count_paid(provider: str, outcome: str) -> None:
    """Count one submit to Ember under the provider it asked for and what came of it."""
    PAID_REQUESTS.labels(provider=provider or "unknown", outcome=outcome).inc()


def time_request(route: str, status: str, seconds: float) -> None:
    """Record how long one request to Ember took, by route (never an id) and status."""
    REQUEST_SECONDS.labels(route=route, status=status).observe(seconds)
