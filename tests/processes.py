"""Real processes over loopback for end-to-end tests: the simulator, manage.py, snippets.

Each stack gets its own data dir (SQLite file, originals, worker.lock) and talks to a
simulator subprocess over real HTTP. Nothing here reaches into product code.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from studio.serving import studio_command

ROOT = Path(__file__).resolve().parent.parent
RESULT = "RESULT:"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dead_pid() -> int:
    """Return the id of a process that has just ended (a dead process's figure file names it)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


class Simulator:
    """The Ember simulator as a subprocess (`manage.py ember_simulator`).

    Its output goes to `log` (a file in `tmp`): a pipe nobody reads fills up and
    then blocks the simulator, and a file is still there to read after a failure.
    """

    def __init__(
        self,
        tmp: Path,
        *,
        job_seconds: float = 0.0,
        verbose: bool = False,
        state_file: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = "dev-token"  # what a Stack's worker sends (its EMBER_TOKEN)
        tmp.mkdir(parents=True, exist_ok=True)
        self.log = tmp / "simulator.log"
        env = {**os.environ, "AVATARS_DATA_DIR": str(tmp / "sim-data"), "PYTHONUNBUFFERED": "1"}
        argv = [
            sys.executable,
            "manage.py",
            "ember_simulator",
            "--port",
            str(self.port),
            "--job-seconds",
            str(job_seconds),
            "--token",
            self.token,
            *([] if state_file is None else ["--state-file", str(state_file)]),
        ]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                argv + (["--verbose"] if verbose else []),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self._wait_until_listening()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + 60
        while "listening" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the simulator did not start"
            time.sleep(0.05)

    def get(self, path: str) -> Any:
        response = self.http.get(path)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.post(path, json=body or {})
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Stack:
    """One Avatars install: a data dir, its environment, and ways to run its commands."""

    def __init__(self, data_dir: Path, simulator: Simulator, **env: str) -> None:
        self.data_dir = data_dir
        self.simulator = simulator
        self.env = {
            **os.environ,
            "AVATARS_DATA_DIR": str(data_dir),
            "EMBER_URL": simulator.url,
            "EMBER_TOKEN": simulator.token,
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        if "DATABASE_URL" not in env:
            self.env.pop("DATABASE_URL", None)

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a command to its end and return it (whatever its exit code)."""
        return subprocess.run(
            list(argv), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def manage(self, *args: str, timeout: float = 120) -> str:
        """Run `manage.py ARGS`, insist it succeeds, and return its output."""
        done = self.run(sys.executable, "manage.py", *args, timeout=timeout)
        assert done.returncode == 0, (
            f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
        )
        return done.stdout

    def popen(
        self, *argv: str, log: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start a process; its output goes to a pipe, or to `log` for chatty long runs.

        A pipe nobody reads fills up (64 KiB) and then blocks the writer: a worker
        logging every state change must write to a file instead.
        """
        output: Any = subprocess.PIPE if log is None else log.open("w")
        return subprocess.Popen(
            list(argv),
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def serve_web(self, port: int, *, log: Path, **env: str) -> subprocess.Popen[str]:
        """Start the studio and API under uvicorn on `port`, as the demo serves them."""
        return self.popen(*studio_command(sys.executable, port), log=log, env=env)

    def django(self, code: str) -> Any:
        """Run `code` with Django set up in a fresh process; return its `result`, via JSON."""
        program = (
            "import django, json, os\n"
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'avatars.settings')\n"
            "django.setup()\n"
            f"{code}\n"
            f"print({RESULT!r} + json.dumps(result, default=str))\n"
        )
        done = self.run(sys.executable, "-c", program)
        assert done.returncode == 0, done.stdout + done.stderr
        line = next(x for x in done.stdout.splitlines() if x.startswith(RESULT))
        return json.loads(line[len(RESULT) :])


def run_snippet(
    code: str, *argv: str, data_dir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh Python with the project's settings and `data_dir`, to its end.

    For what only a process of its own shows: its peak memory, its logging as configured.
    The snippet calls `django.setup()` itself when it needs it; a failure fails the test.
    """
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "avatars.settings",
            "AVATARS_DATA_DIR": str(data_dir),
            **env,
        },
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def wait_for_http(base: str) -> None:
    """Wait until a web server answers at `base` (any answer will do)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/api/v1/subjects", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the web server did not start")


@contextmanager
def simulator(tmp: Path, **kwargs: Any) -> Iterator[Simulator]:
    sim = Simulator(tmp, **kwargs)
    try:
        yield sim
    finally:
        sim.stop()


def server_url() -> str:
    """The PostgreSQL server the suite runs against, or "" for SQLite (the default)."""
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else ""


def database_url(name: str) -> str:
    """This server's URL with another database name."""
    return urlunsplit(urlsplit(server_url())._replace(path=f"/{name}"))


def create_database(name: str, *, template: str = "") -> None:
    import psycopg

    with psycopg.connect(server_url(), autocommit=True) as conn:
        suffix = f" TEMPLATE {template}" if template else ""
        conn.execute(f"CREATE DATABASE {name}{suffix}")


@dataclass
class Template:
    """A migrated install to copy: a data dir, and on PostgreSQL a template database."""

    data_dir: Path
    database: str = ""


def migrated_template(tmp: Path) -> Template:
    """Migrate one install once; stacks copy it instead of migrating again."""
    template = Template(tmp / "template")
    env = {**os.environ, "AVATARS_DATA_DIR": str(template.data_dir)}
    env.pop("DATABASE_URL", None)
    if server_url():
        template.database = f"avatars_tpl_{uuid.uuid4().hex[:12]}"
        create_database(template.database)
        env["DATABASE_URL"] = database_url(template.database)
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return template


def new_stack(template: Template, target: Path, sim: Simulator) -> Stack:
    shutil.copytree(template.data_dir, target)
    if not template.database:
        return Stack(target, sim)
    name = f"avatars_{uuid.uuid4().hex[:12]}"
    create_database(name, template=template.database)
    return Stack(target, sim, DATABASE_URL=database_url(name))


SEED = """
from studio import engine
from tests.factories import png_bytes
ada = engine.create_subject(name="Ada")
bo = engine.create_subject(name="Bo")
engine.add_reference(subject=ada, data=png_bytes(1), file_name="ada.png")
engine.add_reference(subject=bo, data=png_bytes(2), file_name="bo.png")
batch = engine.generate(request={{
    "title": "e2e", "prompt": "a friendly portrait",
    "subjects": [ada.pk, bo.pk],
    "providers": {providers},
    "frames": {frames},
}})
result = str(batch.pk)
"""

SNAPSHOT = """
from pathlib import Path
from studio import originals
from studio.models import Task
rows = []
for t in Task.objects.select_related("asset").order_by("provider", "frame", "ordinal"):
    a = t.asset
    on_disk = False
    if a is not None:
        path = originals.path_for(a.sha256, originals.extension_for(a.mime))
        on_disk = path.is_file() and originals.file_sha256(path) == a.sha256
    rows.append({
        "id": str(t.pk), "kind": t.kind, "state": t.state, "phase": t.phase,
        "error": t.error, "image_id": (t.result or {}).get("image", {}).get("id"),
        "asset_sha256": a.sha256 if a else None, "on_disk": on_disk,
        "history_id": a.ember_history_id if a else None,
        "released": t.protection_released, "attempts": t.attempts.count(),
    })
result = rows
"""


def seed(stack: Stack, *, providers: list[dict[str, Any]], frames: list[str]) -> str:
    return stack.django(SEED.format(providers=repr(providers), frames=repr(frames)))


def snapshot(stack: Stack) -> list[dict[str, Any]]:
    return stack.django(SNAPSHOT)


class Web:
    """The studio served by uvicorn, as the README runs it, for one stack."""

    def __init__(self, stack: Stack, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = stack.serve_web(self.port, log=stack.data_dir / "web.log", **env)
        wait_for_http(self.url)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
