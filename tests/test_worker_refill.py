"""A freed slot is refilled at once, even while the database thread is busy (design.md §6.4)."""

import time

import httpx
import pytest

from studio.ember.client import EmberClient
from studio.worker import Worker
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

BUSY = 0.5  # seconds a due-task query waits behind the writes of other slots


class BusyDatabaseWorker(Worker):
    """A worker whose pump query waits as it does behind 64 slots' writes."""

    def _due(self, limit: int) -> list[str]:
        time.sleep(BUSY)
        return super()._due(limit)


def test_it_starts_the_next_task_as_soon_as_a_slot_frees_without_waiting_for_a_query(
    subject, ember
):
    fake = FakeEmber(ember)
    sent: list[float] = []
    submit = fake._submit

    def timed_submit(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return submit(request)

    fake.submit_route.mock(side_effect=timed_submit)
    plan(subject, candidates=3)

    drain(BusyDatabaseWorker(client=EmberClient(), workers=1, poll_interval=0, tick=1.0))

    assert len(sent) == 3
    # The second task's submit follows the first task's whole life (poll, copy, release):
    # it must not also wait for a query behind the database thread's queue.
    gap = sent[1] - sent[0]
    assert gap < BUSY, f"the freed slot was refilled {gap:.2f} s after the first submit"
