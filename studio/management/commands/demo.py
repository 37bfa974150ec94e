"""`manage.py demo`: set up and run the studio, the worker and the Ember simulator on loopback."""

import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.demo import seed_demo
from studio.ownership import AlreadyRunning, NotDurable, Ownership
from studio.serving import studio_command

ROOT = Path(settings.BASE_DIR)
PR_SET_PDEATHSIG = 1  # prctl(2)
# What a service manager would start again when it exits: a review's demo, its worker
# stopped to see what the page says, stopped the studio and the simulator with it, and
# the only way back (a new demo) printed a new password and signed every tab out.
RESTARTED = ("ember simulator", "worker")
RESTART_FIRST = 5.0  # seconds before a child that exited is started again
RESTART_MOST = 300.0  # seconds: the longest wait, for a child that keeps exiting at once
QUICK_EXIT = 60.0  # seconds: an exit this soon after its start doubles the next wait


class Command(BaseCommand):
    help = "Run the whole studio on loopback: web, worker and Ember simulator. Ctrl-C stops all."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="the studio's port")
        parser.add_argument("--ember-port", type=int, default=8765, help="the simulator's port")
        parser.add_argument("--job-seconds", type=float, default=4.0, help="simulated job time")

    def handle(self, *args: Any, **options: Any) -> None:
        """Migrate, seed, start the three processes, and stop them all on Ctrl-C or a failure."""
        # Before anything is written: a second demo must not set a new password under the
        # feet of the one already running, then fail on its ports.
        _check_free(options["port"], options["ember_port"])
        data_dir = Path(settings.AVATARS_DATA_DIR)
        database = data_dir / "db.sqlite3"  # made empty when settings load, if it was not there
        kept = database.exists() and database.stat().st_size > 0
        call_command("migrate", verbosity=0)
        # The studio runs with DEBUG off, as deployed: it serves the collected static files.
        call_command("collectstatic", interactive=False, verbosity=0)
        seeded = seed_demo()
        ember_url = f"http://127.0.0.1:{options['ember_port']}"
        # The worker talks to the simulator this command starts, whatever EMBER_URL says.
        env = {
            **_as_deployed(data_dir),
            "EMBER_URL": ember_url,
            "EMBER_TOKEN": settings.EMBER_TOKEN,
        }
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.set())
        starter = os.getppid()  # `make`, a shell: gone without a signal, the demo stops too
        commands = _commands(options)
        procs = {name: _start(argv, env) for name, argv in commands.items()}
        url = f"http://127.0.0.1:{options['port']}/"
        self.stdout.write(
            "\nAvatars demo is running (Ctrl-C stops it):\n"
            f"  studio:   {url}\n"
            f"  admin:    {url}admin/\n"
            f"  Ember:    {ember_url} (the simulator)\n"
            f"  login:    {seeded.username}\n"
            f"  password: {seeded.password}\n"
            + (
                f"  data:     {data_dir} (kept from an earlier run; stop the demo and remove "
                "that folder to start over)\n"
                if kept
                else f"  data:     {data_dir}\n"
            )
        )
        self.stdout.flush()
        restarts = Restarts(lambda name: _start(commands[name], env), self._say)
        failed = _watch(procs, stopping, starter, restarts)
        _stop_all(procs)
        if failed:
            raise CommandError(failed)
        self.stdout.write("Avatars demo stopped.")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()


def _as_deployed(data_dir: Path) -> dict[str, str]:
    """The three processes' environment: DEBUG off, as deployed, so that a person meets the
    studio's own pages (a review's wrong address showed Django's debug page, its URL patterns
    listed); plain HTTP on loopback, with a secret of the demo's own, kept in its data dir."""
    return {
        **os.environ,
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": _secret(data_dir / "demo-secret-key"),
        "AVATARS_SSL_REDIRECT": "false",
        "AVATARS_SECURE_COOKIES": "false",
        "AVATARS_HSTS_SECONDS": "0",
    }


def _secret(path: Path) -> str:
    """Return the demo's secret key, made (readable by its owner only) on the first run."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    secret = secrets.token_urlsafe(48)  # 64 characters
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret)
    return secret


def _check_free(*ports: int) -> None:
    """Raise CommandError, before anything is set up, when a port or the worker is taken."""
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                raise CommandError(
                    f"Port {port} on 127.0.0.1 is taken ({exc.strerror}): is a demo already "
                    "running? Stop it, or choose other ports: "
                    'make demo ARGS="--port 8001 --ember-port 8766". Nothing was changed.'
                ) from None
    ownership = Ownership()
    try:
        ownership.acquire()
    except AlreadyRunning as exc:
        raise CommandError(
            f"{exc} (a demo or run_worker on {settings.AVATARS_DATA_DIR}): stop it first. "
            "Nothing was changed."
        ) from None
    except NotDurable as exc:
        raise CommandError(str(exc)) from None
    finally:
        ownership.release()


def _commands(options: dict[str, Any]) -> dict[str, list[str]]:
    """Return the argv of each process the demo runs, by the name it reports failures under."""
    python = sys.executable
    manage = str(ROOT / "manage.py")
    return {
        "ember simulator": [
            python,
            manage,
            "ember_simulator",
            "--port",
            str(options["ember_port"]),
            "--job-seconds",
            str(options["job_seconds"]),
            # Ember remembers its jobs across a demo restart, as the real one would.
            "--state-file",
            str(Path(settings.AVATARS_DATA_DIR) / "ember-simulator.state"),
        ],
        "studio": studio_command(python, options["port"]),
        "worker": [python, manage, "run_worker"],
    }


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start one child in a session of its own, sent SIGTERM if this command dies."""
    # Own sessions: Ctrl-C reaches only this command, which then sends each
    # child exactly one SIGTERM (a second signal would force the worker).
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, start_new_session=True, preexec_fn=_die_with(os.getpid())
    )


def _die_with(parent: int) -> Callable[[], None]:
    """Return what a child runs before its program: SIGTERM when `parent` dies (Linux).

    This command killed outright (SIGKILL: no handler runs) would otherwise leave the
    three running, holding their ports and the worker's lock.
    """

    def arrange() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before the arrangement was made
            os._exit(1)

    return arrange


class Restarts:
    """Start the simulator or the worker again after it exits, as a service manager would:
    after RESTART_FIRST seconds, twice as long each time it exits again soon after a start."""

    def __init__(
        self, start: Callable[[str], subprocess.Popen[bytes]], say: Callable[[str], None]
    ) -> None:
        self._start, self._say = start, say
        self._due: dict[str, float] = {}
        self._wait: dict[str, float] = {}
        self._started: dict[str, float] = dict.fromkeys(RESTARTED, time.monotonic())

    def exited(self, name: str, code: int) -> None:
        """Take in that `name` exited with `code`, and say when it starts again."""
        now = time.monotonic()
        quick = now - self._started[name] < QUICK_EXIT
        wait = min(2 * self._wait[name], RESTART_MOST) if quick and name in self._wait else None
        self._wait[name] = wait or RESTART_FIRST
        self._due[name] = now + self._wait[name]
        self._say(
            f"The {name} {ended(code)}. The rest of the demo goes on; it starts again in "
            f"{self._wait[name]:.0f} s, as a service manager would (Ctrl-C stops all)."
        )

    def start_due(self, procs: dict[str, subprocess.Popen[bytes]]) -> None:
        """Start again each child whose wait is over."""
        now = time.monotonic()
        for name in [name for name, due in self._due.items() if due <= now]:
            del self._due[name]
            procs[name], self._started[name] = self._start(name), now
            self._say(f"The {name} started again.")


def ended(code: int) -> str:
    """Say how a child ended, from its return code: "was killed (SIGKILL)", "exited with code 1"."""
    if code < 0:
        try:
            return f"was killed ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed (signal {-code})"
    return f"exited with code {code}"


def _watch(
    procs: dict[str, subprocess.Popen[bytes]],
    stopping: threading.Event,
    starter: int,
    restarts: Restarts,
) -> str:
    """Wait for a stop signal, the studio's exit or the starter's end, starting the others
    again as they exit; return what failed ("" on a signal, or when whoever started this
    command is gone)."""
    # Only the signal handler sets the event: setting it here too could deadlock on its lock.
    while not stopping.is_set():
        exited = [name for name, proc in procs.items() if proc.poll() is not None]
        for name in exited:
            if name not in RESTARTED:
                return (
                    f"The {name} {ended(procs[name].returncode)}; the demo stopped the others "
                    "too (start it again with `make demo`)."
                )
            restarts.exited(name, procs.pop(name).returncode)
        restarts.start_due(procs)
        if os.getppid() != starter:  # `make` killed outright: this command was handed on
            break
        time.sleep(0.2)
    return ""


def _stop_all(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """Send each running child one SIGTERM, then wait for all (killing any that hangs)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
