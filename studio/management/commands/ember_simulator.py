"""Run the local Ember simulator (studio.ember.simulator) until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from studio.ember.simulator import Simulator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Command(BaseCommand):
    help = "Serve the Ember simulator (see docs/ember.md) for demos and end-to-end tests."
    # The simulator needs no models, so it must start even while they are being changed.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address (default 127.0.0.1).")
        parser.add_argument("--port", type=int, default=8765, help="Port (default 8765).")
        parser.add_argument("--token", default=None, help="Bearer token (default EMBER_TOKEN).")
        parser.add_argument(
            "--job-seconds", type=float, default=2.0, help="How long a job runs (default 2)."
        )
        parser.add_argument("--verbose", action="store_true", help="Log requests to stderr.")
        parser.add_argument(
            "--state-file",
            type=Path,
            default=None,
            help="Keep jobs, images and charges here across restarts (default: memory only).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Start the simulator, announce its URL, and serve until a stop signal arrives."""
        token = options["token"] if options["token"] is not None else settings.EMBER_TOKEN
        try:
            simulator = Simulator(
                host=options["host"],
                port=options["port"],
                token=token,
                job_seconds=options["job_seconds"],
                verbose=options["verbose"],
                state_file=options["state_file"],
            )
        except OSError as exc:
            raise CommandError(
                f"Cannot listen on {options['host']}:{options['port']}: {exc}"
            ) from exc
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in STOP_SIGNALS}
        try:
            simulator.start()
            self.stdout.write(f"Ember simulator listening on {simulator.url}")
            self.stdout.flush()
            # A timed wait keeps the main thread responsive to signals on every platform.
            while not stop.wait(0.5):
                pass
        finally:
            simulator.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
