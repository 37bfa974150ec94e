"""The database thread takes the oldest turn first (studio/worker/turns.py, design.md §6.4)."""

import asyncio
import logging
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.ember.client import EmberClient
from studio.worker import Worker, loop, steps, turns
from studio.worker.transitions import db
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

CALL_SECONDS = 0.02  # what each database call costs in the worker test: the thread is the limit


async def admitted_order(gate: turns.Gate, waits: list[tuple[turns.Turn, bool]]) -> list[int]:
    """Queue one waiter a turn behind a full gate, cancel the flagged ones, then let all in.

    Return the waiters (by index) in the order they got in; each holds its place briefly.
    """
    order: list[int] = []
    for _ in range(gate.width):
        await gate.enter()

    async def waiter(index: int, turn: turns.Turn) -> None:
        turns.TURN.set(turn)
        await gate.enter()
        try:
            assert gate.inside <= gate.width, f"{gate.inside} inside a gate {gate.width} wide"
            order.append(index)
            await asyncio.sleep(0)
        finally:
            gate.leave()

    jobs = [asyncio.create_task(waiter(i, turn)) for i, (turn, _cancel) in enumerate(waits)]
    await asyncio.sleep(0)  # every waiter is queued now
    for job, (_turn, cancel) in zip(jobs, waits, strict=True):
        if cancel:
            job.cancel()
    for _ in range(gate.width):
        gate.leave()
    await asyncio.gather(*jobs, return_exceptions=True)
    assert gate.inside == 0, "places were lost or made up"
    return order


@settings(max_examples=100, deadline=None)
@given(
    waits=st.lists(
        st.tuples(st.tuples(st.floats(0, 10), st.integers(0, 1000)), st.booleans()),
        max_size=12,
        unique_by=lambda w: w[0],
    ),
    width=st.integers(1, 3),
)
def test_waiters_get_in_oldest_turn_first_and_a_cancelled_one_never(waits, width):
    order = asyncio.run(admitted_order(turns.Gate(width), waits))

    kept = [i for i, (_turn, cancel) in enumerate(waits) if not cancel]
    assert order == sorted(kept, key=lambda i: waits[i][0]), f"let in as {order}"


def test_a_waiter_cancelled_as_it_is_let_in_passes_its_place_on():
    async def scenario() -> list[str]:
        gate, got_in = turns.Gate(1), []
        await gate.enter()

        async def waiter(name: str, turn: turns.Turn) -> None:
            turns.TURN.set(turn)
            await gate.enter()
            got_in.append(name)
            gate.leave()

        first = asyncio.create_task(waiter("first", (1.0, 1)))
        second = asyncio.create_task(waiter("second", (2.0, 2)))
        await asyncio.sleep(0)
        gate.leave()  # the place goes to `first`...
        first.cancel()  # ...which is cancelled before it runs again
        await asyncio.gather(first, second, return_exceptions=True)
        assert gate.inside == 0
        return got_in

    assert asyncio.run(scenario()) == ["second"]


def test_database_calls_wait_in_the_order_of_their_coroutines_turns():
    async def scenario() -> list[str]:
        gate, ran = turns.Gate(), []
        gate_token = turns.GATE.set(gate)
        try:
            await gate.enter()  # the thread is busy
            calls = []
            for name, turn in [("newest", (3.0, 3)), ("oldest", (1.0, 1)), ("middle", (2.0, 2))]:
                turns.TURN.set(turn)  # a task copies the context as it is created
                calls.append(asyncio.create_task(db(ran.append)(name)))
            await asyncio.sleep(0.05)
            assert ran == [], "a call ran while the thread was busy"
            gate.leave()
            await asyncio.gather(*calls)
        finally:
            turns.GATE.reset(gate_token)
        return ran

    assert asyncio.run(scenario()) == ["oldest", "middle", "newest"]


@pytest.mark.django_db(transaction=True)
def test_jobs_that_end_together_are_finished_one_at_a_time_not_in_step(
    subject, ember, monkeypatch, caplog
):
    """With the database thread the limit, the first job seen ended is done early.

    Served first come, first served, every task would write `copying` before any wrote
    `done`, and the next round would start together again.
    """
    FakeEmber(ember)  # every job has ended by its first poll
    tasks = plan(subject, candidates=8)
    real = db

    def slow(fn):
        def call(*args, **kwargs):
            time.sleep(CALL_SECONDS)
            return fn(*args, **kwargs)

        return real(call)

    for module in (steps, loop):
        monkeypatch.setattr(module, "db", slow)
    caplog.set_level(logging.INFO, logger="studio.tasks")

    drain(Worker(client=EmberClient(), workers=len(tasks), poll_interval=0, tick=60.0))

    moves = [
        re.search(r"to=(\w+)", r.getMessage())[1] for r in caplog.records if "to=" in r.getMessage()
    ]
    assert moves.count("done") == len(tasks), moves
    copying_before_first_done = moves[: moves.index("done")].count("copying")
    assert copying_before_first_done <= len(tasks) // 2, (
        f"{copying_before_first_done} of {len(tasks)} tasks wrote `copying` before the first "
        f"`done` (order: {moves})"
    )


@pytest.mark.django_db
def test_a_job_seen_ended_starts_a_turn_and_the_refill_of_its_slot_goes_on_with_it(subject, ember):
    FakeEmber(ember)
    plan(subject, candidates=2)
    given: list[turns.Turn | None] = []
    ended: list[turns.Turn | None] = []

    class Recording(Worker):
        async def drive(self, task_id, *, row=None, turn=None):
            given.append(turn)
            await super().drive(task_id, row=row, turn=turn)
            ended.append(turns.TURN.get())

    drain(Recording(client=EmberClient(), workers=1, poll_interval=0, tick=60.0))

    assert len(given) == 2 and None not in given
    assert ended[0] > given[0], "the first job's end did not start a later turn"
    assert given[1] == ended[0], "the refill did not take the turn of the slot it filled"
