"""The benchmarks' own logic: the runs kept, the rows printed, the loaded row's phases."""

import os
import time
from collections.abc import Callable

import pytest

from bench.common import Result, cores, cpu_ceiling, process_cpu_seconds, report, run_kind
from bench.loaded import _result, _while_driving
from bench.slots import describe
from bench.throughput import cpu_text

STAGES = ("pump", "throughput", "slots")


def test_a_run_of_every_stage_at_full_size_is_full() -> None:
    assert run_kind(quick=False, ran=set(STAGES), stages=STAGES) == "full"
    # make bench-postgres adds a stage of its own
    assert run_kind(quick=False, ran={*STAGES, "loaded_postgres"}, stages=STAGES) == "full"


def test_a_run_of_some_stages_is_partial_and_a_quick_one_quick() -> None:
    assert run_kind(quick=False, ran={"throughput", "slots"}, stages=STAGES) == "partial"
    assert run_kind(quick=True, ran=set(STAGES), stages=STAGES) == "quick"


def test_the_printed_table_says_what_kind_of_run_it_was() -> None:
    row = Result("throughput with 4, 16, 64 slots", 0.9, "x", "each ≥ 90%", True, "figures")

    printed = report([row], kind="partial", seconds=28).splitlines()

    assert printed[0] == "Avatars benchmarks (partial run, 28 s)"
    assert "| throughput with 4, 16, 64 slots | 0.90x | each ≥ 90% | PASS | figures |" in printed


def test_a_slot_count_is_printed_with_where_its_time_went() -> None:
    figures = {"tasks": 80, "seconds": 5.0, "rate": 16.0, "db_busy": 0.16, "hop": 0.008}

    printed = describe(16, {**figures, "cpu": 0.024, "sim_cpu": 0.016}, on=2)

    assert printed == (
        "16 slots: 16.0 tasks/s of 16 (100%, 80 tasks in 5.0 s; database thread busy 16%, "
        "a hop 8 ms; CPU a task: worker 24 ms, simulator 16 ms, at most 50 tasks/s on 2 cores)"
    )


def test_a_process_cpu_time_grows_with_the_work_it_does() -> None:
    before = process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass

    spent = process_cpu_seconds(os.getpid()) - before

    assert 0.15 <= spent <= 5, f"{spent:.2f} s of CPU counted for 0.2 s spent"


def test_the_engine_row_says_the_cpu_each_side_spent_a_task() -> None:
    printed = cpu_text({"engine": (0.0194, 0.0156), "bare": (0.0046, 0.0152)}, on=2, needed=56.48)

    assert printed == (
        "CPU a task: the worker 19.4 ms vs the bare client 4.6 ms, the simulator 15.6 ms vs "
        "15.2 ms; on 2 cores, that CPU allows the engine at most 57.1 tasks/s, the goal needs 56.5"
    )


def test_the_cpu_ceiling_is_the_cores_over_the_cpu_a_task() -> None:
    # 40 ms of CPU a task on 2 cores: 50 tasks/s at most; on 4 cores, 100.
    assert cpu_ceiling(0.040, on=2) == pytest.approx(50.0)
    assert cpu_ceiling(0.040, on=4) == pytest.approx(100.0)


def test_the_cores_counted_are_those_this_process_may_run_on() -> None:
    assert cores() == len(os.sched_getaffinity(0))


class _Owner:
    """A stand-in for the loaded row's worker child: answers `drive` after `seconds`."""

    def __init__(self, seconds: float, *, fails: bool = False) -> None:
        self.seconds, self.fails, self.sent = seconds, fails, []

    def send(self, op: str) -> None:
        self.sent.append(op)

    def receive(self) -> dict[str, float]:
        time.sleep(self.seconds)
        if self.fails:
            raise RuntimeError("the child died")
        return {"done": 1000, "seconds": self.seconds}


def _load_until(stop: Callable[[], bool]) -> dict[str, float]:
    started = time.monotonic()
    while not stop():
        time.sleep(0.01)
    return {"seconds": time.monotonic() - started}


def test_the_busy_clients_run_exactly_as_long_as_the_worker_does() -> None:
    owner = _Owner(0.5)

    done = _while_driving(owner, _load_until)  # type: ignore[arg-type]

    assert owner.sent == ["drive"]
    assert done["done"] == 1000
    assert 0.45 <= done["load"]["seconds"] < 3, f"clients ran {done['load']['seconds']:.2f} s"


def test_a_worker_child_that_fails_stops_the_clients_and_is_raised() -> None:
    with pytest.raises(RuntimeError, match="the child died"):
        _while_driving(_Owner(0.1, fails=True), _load_until)  # type: ignore[arg-type]


def test_the_loaded_row_fails_when_too_few_requests_ran_beside_the_worker() -> None:
    idle = {"times": [0.1] * 500, "5xx": 0, "seconds": 20.0}
    done = {"done": 1000, "seconds": 1.0}

    few = _result(
        "SQLite", idle, {"times": [0.1] * 50, "5xx": 0, "seconds": 1.0}, done, 1000, locked=0
    )
    many = _result(
        "SQLite", idle, {"times": [0.1] * 900, "5xx": 0, "seconds": 9.0}, done, 1000, locked=0
    )

    assert (few.passed, few.notes) == (
        False,
        ["WARNING: fewer than 200 requests while the worker ran; raise the task count"],
    )
    assert (many.passed, many.notes) == (True, [])
    assert "900 requests in 9.0 s vs 500 in 20.0 s" in many.raw
