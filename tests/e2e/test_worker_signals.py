"""Stopping is not cancelling: SIGTERM over a real worker process (docs/design.md §6)."""

import signal
import sys
import time

from tests.processes import Stack, seed

STATES = (
    "from studio.models import Task\nresult = sorted(Task.objects.values_list('state', flat=True))"
)


def start_worker(stack: Stack):
    proc = stack.popen(sys.executable, "manage.py", "run_worker")
    assert proc.stdout is not None
    assert "Avatars worker running" in proc.stdout.readline()
    return proc


def wait_for_submits(stack: Stack, count: int) -> None:
    """Wait until Ember has `count` submits in flight (logged, not yet answered)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = stack.simulator.get("/_sim/requests")["items"]
        if sum(1 for r in items if r["method"] == "POST") >= count:
            return
        time.sleep(0.05)
    raise AssertionError("the worker never submitted")


def test_sigterm_lets_in_flight_submits_hear_embers_answer(stack: Stack):
    stack.simulator.post("/_sim/config", {"latency": {"submit": 2.0}})
    seed(stack, providers=[{"provider": "openai", "candidates": 2}], frames=["image"])
    worker = start_worker(stack)
    wait_for_submits(stack, 2)

    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=60)

    assert worker.returncode == 0, out
    # The answers were recorded: no routine restart leaves a task uncertain.
    assert stack.django(STATES) == ["running", "running"]
    charges = stack.simulator.get("/_sim/charges")
    assert charges["total"] == 2
    # And the next start picks the jobs up by id without paying again.
    stack.manage("run_worker", "--once")
    assert stack.django(STATES) == ["done", "done"]
    assert stack.simulator.get("/_sim/charges")["total"] == 2


def test_a_second_signal_stops_the_worker_at_once(stack: Stack):
    stack.simulator.post("/_sim/config", {"latency": {"submit": 20.0}})
    seed(stack, providers=[{"provider": "openai", "candidates": 1}], frames=["image"])
    worker = start_worker(stack)
    wait_for_submits(stack, 1)

    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=15)  # well inside the 20 s the submit would take

    # It did not wait for Ember's answer: the task is left `submitting`, which the
    # next start reads as "may have reached Ember".
    assert stack.django(STATES) == ["submitting"]
