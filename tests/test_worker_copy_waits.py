"""A copy waits out an Ember that is away for a while, as a poll does, and a stop.

Found by a review that restarted its Ember for six seconds while 24 copies were in
flight: nine rested `copy_failed` after three tries in three seconds, for a person to
reconcile one by one.
"""

import asyncio

import httpx
import pytest
from asgiref.sync import async_to_sync

from studio.ember.client import EmberClient
from studio.models import TaskState
from studio.worker import Worker
from studio.worker.steps import FETCH_TRIES, FETCH_TRIES_EMBER_AWAY
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db


def away_for(fake: FakeEmber, failures: list[object]):
    """Make the image file route answer each of `failures` in turn, then the image."""
    left = list(failures)

    def file(request, image_id):
        if left:
            failure = left.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return httpx.Response(failure, json={"error": {"code": "x", "message": "Down."}})
        return fake._file(request, image_id)

    fake.file_route.mock(side_effect=file)


@pytest.mark.parametrize(
    "failure", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 500, 502, 503]
)
def test_a_copy_waits_out_an_ember_that_is_away_and_finishes(subject, ember, worker, failure):
    fake = FakeEmber(ember)
    away_for(fake, [failure] * (FETCH_TRIES_EMBER_AWAY - 1))
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.state, task.phase, task.error)
    assert fake.file_route.call_count == FETCH_TRIES_EMBER_AWAY, "each failure, then the image"
    assert len(fake.submits) == 1 and fake.release_route.call_count == 1


def test_a_copy_rests_copy_failed_once_ember_stays_away(subject, ember, worker):
    fake = FakeEmber(ember)
    away_for(fake, [httpx.ConnectError("refused")] * 100)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert fake.file_route.call_count == FETCH_TRIES_EMBER_AWAY
    assert fake.release_route.call_count == 0


def test_a_copy_failing_for_the_image_itself_is_not_waited_on(subject, ember, worker):
    """A 4xx other than 404 is Ember's word about the image: waiting changes nothing."""
    fake = FakeEmber(ember)
    away_for(fake, [422] * 100)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert fake.file_route.call_count == FETCH_TRIES


def test_a_stop_asked_while_a_copy_waits_leaves_it_copying_for_the_next_start(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    patient = Worker(client=EmberClient(), workers=1, poll_interval=0, tick=0, fetch_retry_delay=30)
    fetches: list[str] = []

    def file(request, image_id):
        fetches.append(image_id)
        patient.request_stop()  # a SIGTERM while Ember is down
        raise httpx.ConnectError("refused")

    fake.file_route.mock(side_effect=file)
    [task] = plan(subject)

    async def run() -> None:
        await asyncio.wait_for(patient.run(), timeout=20)  # the 30 s wait is cut short

    patient.lock()
    try:
        async_to_sync(run)()
    finally:
        patient.unlock()

    task.refresh_from_db()
    assert (task.state, len(fetches)) == (TaskState.COPYING, 1), (task.phase, task.error)
    # Found by a hostile-files review: a copy that kept failing (an Ember trickling its
    # bytes, each try cut at 300 s) showed only "Copying the original from Ember" for 41
    # minutes. The task says which try failed, why, and when the next is.
    assert task.phase == (
        f"Copying the original from Ember. Try 1 of {FETCH_TRIES_EMBER_AWAY} failed: Ember "
        "could not be reached (ConnectError). Trying again in 30 s."
    ), task.phase
    fake.file_route.mock(side_effect=fake._file)
    drain(worker)  # the next start
    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert len(fake.submits) == 1, "copied from the saved answer, never made again"
