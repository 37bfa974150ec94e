"""Run a manage.py command with the process SIGKILLed at one named step of the worker.

Usage: python tests/killpoints.py POINT COMMAND [ARGS...]

The kill points patch the worker, the store and the Ember client from outside, in
this subprocess only; product code has no hooks for them. SIGKILL is the crash no
`finally` can soften: whatever the database and the disk hold at that instant is
what the next worker wakes up to.
"""

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402

from studio import originals  # noqa: E402
from studio.ember.client import EmberClient  # noqa: E402
from studio.worker import Worker  # noqa: E402


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_before(owner: Any, name: str) -> None:
    """Die when `owner.name` is called, before it runs."""

    async def before(*args: Any, **kwargs: Any) -> Any:
        die()

    setattr(owner, name, before)


def kill_after(owner: Any, name: str) -> None:
    """Die right after `owner.name` returns, before its caller records anything."""
    real = getattr(owner, name)
    if asyncio.iscoroutinefunction(real):

        async def after_async(*args: Any, **kwargs: Any) -> Any:
            result = await real(*args, **kwargs)
            die()
            return result

        setattr(owner, name, after_async)
    else:

        def after(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            die()
            return result

        setattr(owner, name, after)


POINTS: dict[str, Callable[[], None]] = {
    # `preparing` is committed; the references are about to be read.
    "after-preparing": lambda: kill_before(Worker, "load_references"),
    # `submitting` is committed; the POST has not left.
    "before-post": lambda: kill_before(EmberClient, "submit"),
    # Ember accepted (and charged) the job; `running` is not written.
    "after-accept": lambda: kill_after(EmberClient, "submit"),
    # `running` with its job id is committed; a poll is under way.
    "while-polling": lambda: kill_before(EmberClient, "poll"),
    # `copying` with Ember's answer is committed; finish() has not started.
    "after-copying": lambda: kill_before(Worker, "finish"),
    # The original is on disk under its hash; its Asset row is not written.
    "after-original": lambda: kill_after(originals, "save"),
    # The Asset row is committed; the release has not been sent.
    "after-row": lambda: kill_before(EmberClient, "release_status"),
    # Ember took the release; `done` is not written.
    "after-release": lambda: kill_after(EmberClient, "release_status"),
}


def main() -> None:
    point, *command = sys.argv[1:]
    POINTS[point]()
    call_command(*command)


if __name__ == "__main__":
    main()
