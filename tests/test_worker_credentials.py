"""Ember refusing our credentials (a wrong EMBER_TOKEN) is the token's fault, not a task's.

Found by a review that started the worker with a wrong token: every copy in flight went
`copy_failed` within 3 s, for a person to reconcile one by one, and once the token was
right and the worker started again the queued tasks still waited out their 5 minutes.
"""

from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from studio.models import Task, TaskState
from studio.phrases import AUTH_PHASE, COPYING_PHASE, QUEUED_PHASE
from studio.worker import credentials
from studio.worker.credentials import AUTH_BACKOFF
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

REFUSED = {"error": {"code": "unauthorized", "message": "Missing or wrong bearer token."}}


def refused_then_served(fake: FakeEmber, refusals: int) -> None:
    """Have the image file route refuse our token `refusals` times, then send the image."""
    left = [refusals]

    def file(request, image_id):
        if left[0] > 0:
            left[0] -= 1
            return httpx.Response(401, json=REFUSED)
        return fake._file(request, image_id)

    fake.file_route.mock(side_effect=file)


def test_a_copy_refused_for_our_token_waits_copying_and_is_not_asked_again_at_once(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    refused_then_served(fake, 100)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPYING, (task.state, task.phase, task.error)
    assert task.phase.startswith(AUTH_PHASE), task.phase
    assert task.error == "Missing or wrong bearer token."
    wait = (task.next_attempt_at - timezone.now()).total_seconds()
    assert AUTH_BACKOFF - 30 < wait <= AUTH_BACKOFF, f"due again in {wait:.0f} s"
    assert fake.file_route.call_count == 1, "a refused token is not asked with again at once"
    assert len(fake.submits) == 1 and fake.release_route.call_count == 0


def test_a_worker_started_anew_copies_what_waited_on_the_token_at_once(subject, ember, worker):
    fake = FakeEmber(ember)
    refused_then_served(fake, 1)
    [copy] = plan(subject)
    drain(worker)  # its copy refused: waiting
    copy.refresh_from_db()
    assert copy.state == TaskState.COPYING
    # A task whose submit Ember refused for the token waits its 5 minutes queued.
    [queued] = plan(subject)
    later = timezone.now() + timedelta(seconds=AUTH_BACKOFF)
    Task.objects.filter(pk=queued.pk).update(next_attempt_at=later, phase=AUTH_PHASE)

    assert credentials.wake(timezone.now()) == 2  # as a worker started anew does
    queued.refresh_from_db()
    copy.refresh_from_db()
    assert (queued.phase, copy.phase) == (QUEUED_PHASE, COPYING_PHASE), "no word of the token"
    assert queued.next_attempt_at <= timezone.now()

    drain(worker)  # the worker started again, its token right now

    copy.refresh_from_db()
    queued.refresh_from_db()
    assert (copy.state, queued.state) == (TaskState.DONE, TaskState.DONE), (
        copy.phase,
        queued.phase,
    )
    assert fake.charges(str(copy.pk)) == 1, "the copy waited; nothing was sent again"
    assert len(fake.submits) == 2 and fake.release_route.call_count == 2


def test_a_poll_refused_for_our_token_waits_and_never_runs_into_the_poll_bound(
    subject, ember, worker
):
    """Found by a re-review: each refused poll counted towards the 30-minute bound, and a
    job Ember had finished went `uncertain` for a person to reconcile."""
    fake = FakeEmber(ember)
    real_poll = fake._poll
    refusing = [True]

    def poll(request, job_id):
        return httpx.Response(401, json=REFUSED) if refusing[0] else real_poll(request, job_id)

    fake.poll_route.mock(side_effect=poll)
    [task] = plan(subject)
    worker.poll_bound = 0.0  # every poll is past the bound: one refused must not end it

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.RUNNING, (task.state, task.phase, task.error)
    assert task.phase == f"{AUTH_PHASE}; the job is asked about again then"
    assert fake.poll_route.call_count == 1

    refusing[0] = False
    assert credentials.wake(timezone.now()) == 1  # a worker started with the right token
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.state, task.phase)
    assert fake.charges(str(task.pk)) == 1
