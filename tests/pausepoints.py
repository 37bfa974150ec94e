"""Run a manage.py command that stops itself (SIGSTOP) when it first reaches a named function.

Usage: python tests/pausepoints.py MODULE:FUNCTION[,MODULE:FUNCTION...] COMMAND [ARGS...]
(each point stops it once, the first time it is reached)

A test starts it with `start`, waits for the stop with `wait_paused`, does what must
happen at that instant (a second run, a Ctrl-C, a kill) and lets it go on with SIGCONT.
The pause is patched in from outside, in this subprocess only; product code has no hooks
for it. Importing this module starts nothing: the patching happens when it runs.
"""

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def start(point: str, *command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start `manage.py COMMAND` to stop itself on first reaching `point` (MODULE:FUNCTION,
    or several joined by commas)."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__)), point, *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_paused(proc: subprocess.Popen[str]) -> None:
    """Wait until `proc` has stopped at its point; fail, saying what it printed, if it ended."""
    _pid, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        proc.returncode = os.waitstatus_to_exitcode(status)
        out, err = proc.communicate()
        raise AssertionError(f"it ended before its pause point ({proc.returncode}): {out}{err}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Let a paused `proc` go on; return its exit code and everything it printed."""
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


def pause_at(point: str) -> None:
    """Make the function `point` names stop this process on its first call, then run."""
    module_name, name = point.split(":")
    module = importlib.import_module(module_name)
    real = getattr(module, name)
    calls: list[int] = []

    def paused(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            os.kill(os.getpid(), signal.SIGSTOP)
        return real(*args, **kwargs)

    setattr(module, name, paused)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    for point in sys.argv[1].split(","):
        pause_at(point)
    execute_from_command_line(["manage.py", *sys.argv[2:]])


if __name__ == "__main__":
    main()
