"""A freed slot is refilled at once, even while the database thread is busy (design.md §6.4)."""

import json
import time

import httpx
import pytest
from asgiref.sync import sync_to_async

from studio.ember.client import EmberClient
from studio.engine.cancel import cancel_task
from studio.models import Task
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


def test_a_waiting_task_cancelled_before_its_slot_frees_is_never_sent(subject, ember):
    """The refill starts from the row the pump read: its first write must see the cancel."""
    fake = FakeEmber(ember)
    first, second, third = plan(subject, candidates=3)
    submit = fake._submit
    sent: list[str] = []

    async def submit_then_cancel(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["source_metadata"]["task_id"])
        if len(sent) == 1:
            # The pump read all three when it started the first: the others wait in its
            # surplus; a person cancels one while the first is with Ember.
            await sync_to_async(lambda: cancel_task(task=Task.objects.get(pk=second.pk)))()
        return submit(request)

    fake.submit_route.mock(side_effect=submit_then_cancel)
    drain(Worker(client=EmberClient(), workers=1, poll_interval=0, tick=60.0))

    assert sent == [str(first.pk), str(third.pk)], "Ember saw a submit for the cancelled task"
    states = {t.pk: t.state for t in Task.objects.all()}
    assert states == {first.pk: "done", second.pk: "cancelled", third.pk: "done"}
