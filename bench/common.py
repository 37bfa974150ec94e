"""What the benchmarks share: results, child processes with their own data dir, the simulator.

The parent (`bench.run`) only orchestrates. Each stage runs in one or two child
processes (`python -m bench.child MODULE`), each with its own temporary
`AVATARS_DATA_DIR`, so no stage can touch `./data` and two data sets can be
measured side by side, alternating, in the same run.
"""

import json
import math
import os
import platform
import secrets
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from studio.serving import studio_command

ROOT = Path(__file__).resolve().parent.parent


class ChildFailed(RuntimeError):
    """A child process raised, or died, while running an operation."""


@dataclass
class Result:
    """One row of the table: what was measured against which target, and the figures behind it."""

    goal: str
    measured: float
    unit: str  # "x" for ratios, "s" for durations
    target: str
    passed: bool
    raw: str
    notes: list[str] = field(default_factory=list)
    stage: str = ""  # the module that measured it (set by bench.run)

    @property
    def measured_text(self) -> str:
        if math.isnan(self.measured):
            return "n/a"
        if self.unit == "x":
            return f"{self.measured:.2f}x"
        return f"{self.measured:.2f} {self.unit}"


@dataclass
class Context:
    """Where one run keeps its files, and how big it is."""

    tmp: Path
    quick: bool
    database_url: str = ""  # PostgreSQL for the stages that run on it (make bench-postgres)

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def log(self, message: str) -> None:
        """Say what the run is doing (stderr, so the table on stdout stays clean)."""
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_kind(*, quick: bool, ran: set[str], stages: Sequence[str]) -> str:
    """Name a run for its results file: `full` only when every stage ran at full size.

    Only full runs are kept in the repository, to compare with the next one; a quick
    run, or one of some stages (`--only`), is `quick` or `partial` and is ignored.
    """
    if quick:
        return "quick"
    return "full" if set(stages) <= ran else "partial"


def child_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """Return a child's environment: its own data dir, production-like Django settings.

    DEBUG is off, as in production (with DEBUG on, Django keeps every query in
    memory and templates carry debug information). Nothing inherited may point a
    child at another database or change the worker's defaults behind our back.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "AVATARS_POLL_INTERVAL", "AVATARS_WORKERS", "EMBER_URL")
    }
    env.update(
        {
            "AVATARS_DATA_DIR": str(data_dir),
            "DJANGO_SETTINGS_MODULE": "avatars.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": f"bench-{secrets.token_hex(24)}",
            "DJANGO_ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
            "AVATARS_SSL_REDIRECT": "false",
            "AVATARS_SECURE_COOKIES": "false",
            "AVATARS_HSTS_SECONDS": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


class Child:
    """A Django process with its own data dir, driven one JSON line at a time."""

    def __init__(
        self, ctx: Context, name: str, module: str, *, data_dir: Path | None = None, **env: str
    ) -> None:
        self.name = name
        self.data_dir = data_dir or ctx.tmp / name
        self.log_path = ctx.tmp / f"{name}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.child", module],
            cwd=ROOT,
            env=child_env(self.data_dir, **env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def send(self, op: str, **args: Any) -> None:
        """Start an operation without waiting for it (see `receive`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        """Wait for the answer to the operation last sent."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            raise ChildFailed(f"{self.name} exited ({code}); see {self.log_path}:\n{self.tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise ChildFailed(f"{self.name}: {answer['error']}")
        return answer["ok"]

    def call(self, op: str, **args: Any) -> Any:
        self.send(op, **args)
        return self.receive()

    def tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@contextmanager
def children(ctx: Context, module: str, *names: str, **env: str) -> Iterator[list[Child]]:
    """Start one child per name (all running `module`) and close them all at the end."""
    with ExitStack() as stack:
        started = []
        for name in names:
            child = Child(ctx, name, module, data_dir=None, **env)
            stack.callback(child.close)
            started.append(child)
        yield started


def call_all(calls: Sequence[tuple[Child, str, dict[str, Any]]]) -> list[Any]:
    """Run operations in several children at once (set-up work, never timed)."""
    for child, op, args in calls:
        child.send(op, **args)
    return [child.receive() for child, _op, _args in calls]


class SimProcess:
    """The real Ember simulator in a process of its own, over loopback (`python -m bench.sim`)."""

    def __init__(
        self,
        ctx: Context,
        *,
        name: str = "simulator",
        job_seconds: float = 0.0,
        durations: dict[str, float] | None = None,
    ) -> None:
        self._log: IO[str] = (ctx.tmp / f"{name}.log").open("w")
        argv = [sys.executable, "-m", "bench.sim", "--job-seconds", str(job_seconds)]
        if durations:
            path = ctx.tmp / f"{name}-durations.json"
            path.write_text(json.dumps(durations))
            argv += ["--durations", str(path)]
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise ChildFailed(f"the simulator did not start: {self.url!r}")

    def cpu_seconds(self) -> float:
        """Return the CPU time the simulator has used so far (NaN where /proc is not)."""
        return process_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the simulator stops when its stdin ends
        _reap(self.proc)
        self._log.close()

    def __enter__(self) -> "SimProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WebProcess:
    """The studio and API under uvicorn on a free loopback port, on a child's data dir."""

    def __init__(self, ctx: Context, data_dir: Path, *, name: str = "web", **env: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._log: IO[str] = (ctx.tmp / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            studio_command(sys.executable, port),
            cwd=ROOT,
            env=child_env(data_dir, **env),
            stdout=self._log,
            stderr=self._log,
        )
        self._wait()

    def _wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                httpx.get(f"{self.url}/accounts/login/", timeout=5)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        raise ChildFailed(f"uvicorn did not start; see {self._log.name}")

    def close(self) -> None:
        self.proc.terminate()
        _reap(self.proc)
        self._log.close()

    def __enter__(self) -> "WebProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reap(proc: "subprocess.Popen[Any]") -> None:
    """Wait for a process told to stop; kill it when it has not within 30 s."""
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- figures ----------------------------------------------------------------


def percentile(values: Sequence[float], share: float) -> float:
    """Return the value below which `share` of `values` fall (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Return the median of the per-round ratios (pairs taken side by side resist drift)."""
    return median([n / d for n, d in zip(numerators, denominators, strict=True)])


def status_kib(pid: int, field: str = "VmRSS") -> int:
    """Return a memory figure of a process from /proc/PID/status, in KiB (VmRSS: resident set)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def process_cpu_seconds(pid: int) -> float:
    """Return the user + system CPU seconds a process used, all its threads (NaN without /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = stat.rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cores() -> int:
    """Return how many cores this process (and the children it starts) may run on (nproc)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def cpu_ceiling(cpu_per_task: float, *, on: int) -> float:
    """Return tasks/s at most, if the processes spending `cpu_per_task` kept `on` cores busy.

    The worker and the simulator share the machine's cores: what they spend a task
    together, over the cores there are, is a rate no scheduling can beat.
    """
    return on / cpu_per_task


def machine(path: Path) -> str:
    """Describe the machine: cores, CPU model, the disk under `path`, Python and SQLite."""
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    device, fstype = _mount_of(path)
    total = shutil.disk_usage(path).total / 1e9
    return (
        f"{cores()} cores (nproc), {cpu}; {path} on {device} ({fstype}, {total:.0f} GB); "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def _mount_of(path: Path) -> tuple[str, str]:
    best = ("?", "?", "")
    mounts = Path("/proc/mounts")
    if mounts.exists():
        for line in mounts.read_text().splitlines():
            device, point, fstype, *_ = line.split()
            inside = str(path).startswith(point.rstrip("/") + "/") or str(path) == point
            if inside and len(point) > len(best[2]):
                best = (device, fstype, point)
    return best[0], best[1]


def report(results: list[Result], *, kind: str, seconds: float) -> str:
    """Return the table (Markdown, so it can go into the README as printed) and the notes.

    `kind` is the run's kind (`bench.common.run_kind`): full, quick or partial.
    """
    lines = [
        f"Avatars benchmarks ({kind} run, {seconds:.0f} s)",
        f"Machine: {machine(Path(tempfile.gettempdir()))}",
        "",
        "| goal | measured | target | result | raw figures |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        verdict = "PASS" if r.passed else "**FAIL**"
        lines.append(f"| {r.goal} | {r.measured_text} | {r.target} | {verdict} | {r.raw} |")
    for r in results:
        if r.notes:
            lines += ["", f"{r.goal}:", *(f"  {note}" for note in r.notes)]
    return "\n".join(lines)
