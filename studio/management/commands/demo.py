"""`manage.py demo`: set up and run the studio, the worker and the Ember simulator on loopback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.demo import seed_demo

ROOT = Path(settings.BASE_DIR)


class Command(BaseCommand):
    help = "Run the whole studio on loopback: web, worker and Ember simulator. Ctrl-C stops all."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="the studio's port")
        parser.add_argument("--ember-port", type=int, default=8765, help="the simulator's port")
        parser.add_argument("--job-seconds", type=float, default=4.0, help="simulated job time")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        seeded = seed_demo()
        ember_url = f"http://127.0.0.1:{options['ember_port']}"
        # The worker talks to the simulator this command starts, whatever EMBER_URL says.
        env = {**os.environ, "EMBER_URL": ember_url, "EMBER_TOKEN": settings.EMBER_TOKEN}
        python = sys.executable
        manage = str(ROOT / "manage.py")
        commands = {
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
            "studio": [
                python,
                "-m",
                "uvicorn",
                "avatars.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(options["port"]),
                "--log-level",
                "warning",
            ],
            "worker": [python, manage, "run_worker"],
        }
        stopping = False

        def stop(*_: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        procs = {
            name: subprocess.Popen(
                # Own sessions: Ctrl-C reaches only this command, which then sends each
                # child exactly one SIGTERM (a second signal would force the worker).
                argv,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )
            for name, argv in commands.items()
        }
        url = f"http://127.0.0.1:{options['port']}/"
        self.stdout.write(
            "\nAvatars demo is running (Ctrl-C stops it):\n"
            f"  studio:   {url}\n"
            f"  admin:    {url}admin/\n"
            f"  Ember:    {ember_url} (the simulator)\n"
            f"  login:    {seeded.username}\n"
            f"  password: {seeded.password}\n"
        )
        self.stdout.flush()
        failed = ""
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    failed = f"The {name} exited with code {proc.returncode}."
                    stopping = True
            time.sleep(0.2)
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
        if failed:
            raise CommandError(failed)
        self.stdout.write("Avatars demo stopped.")
