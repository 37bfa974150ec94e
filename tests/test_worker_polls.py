"""How often the worker asks Ember about a running job (docs/design.md §6.6).

Ember's jobs here take a known time: each says "running" until then. A poll sent
while the job cannot be done yet is a request spent for nothing; a poll sent late
keeps a finished job waiting.
"""

import time
from collections import defaultdict
from datetime import timedelta

import httpx
import pytest
import respx
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio.ember.client import EmberClient
from studio.models import Task, TaskState
from studio.store import move
from studio.worker import Worker
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

INTERVAL = 0.1  # seconds: the configured poll interval
JOB_SECONDS = 0.6  # how long Ember takes for each job, unless told otherwise
MARGIN = 0.1  # seconds a poll itself may take on a busy machine


class TimedEmber(FakeEmber):
    """A FakeEmber whose jobs run for `durations[n]` seconds (the nth job), else JOB_SECONDS."""

    def __init__(self, router: respx.Router, durations: dict[int, float] | None = None) -> None:
        super().__init__(router)
        self.durations = durations or {}
        self.ends: dict[str, float] = {}  # job id -> time.monotonic() it ends
        self.polls: dict[str, list[float]] = defaultdict(list)  # job id -> when it was asked

    def _submit(self, request: httpx.Request) -> httpx.Response:
        response = super()._submit(request)
        job_id = response.json()["id"]
        seconds = self.durations.get(len(self.ends) + 1, JOB_SECONDS)
        self.ends.setdefault(job_id, time.monotonic() + seconds)
        return response

    def _poll(self, request: httpx.Request, job_id: str) -> httpx.Response:
        asked = time.monotonic()
        self.polls[job_id].append(asked)
        if asked < self.ends[job_id]:
            return httpx.Response(200, json={"id": job_id, "status": "running"})
        return super()._poll(request, job_id)

    def seen_late(self, job_id: str) -> float:
        """Return how long after its end the job was first seen ended."""
        end = self.ends[job_id]
        return min(t for t in self.polls[job_id] if t >= end) - end


def timed_worker(slots: int) -> Worker:
    return Worker(
        client=EmberClient(), workers=slots, poll_interval=INTERVAL, tick=0, fetch_retry_delay=0
    )


def test_it_spends_at_most_three_polls_on_a_job_once_it_knows_how_long_such_jobs_take(
    subject, ember
):
    fake = TimedEmber(ember)
    tasks = plan(subject, candidates=6)

    drain(timed_worker(slots=2))  # three rounds of two half-second jobs

    assert {t.state for t in Task.objects.filter(pk__in=[t.pk for t in tasks])} == {TaskState.DONE}
    per_job = [len(fake.polls[job_id]) for job_id in fake.ends]
    # The first round teaches the worker; polling every interval costs ~6 polls a job.
    later = per_job[2:]
    assert max(later) <= 3, (
        f"a {JOB_SECONDS} s job polled every {INTERVAL} s needs at most 3 polls once its "
        f"length is known; polls per job, in submit order: {per_job}"
    )


def test_once_it_knows_a_steady_job_it_asks_about_once_or_twice_near_its_end(subject, ember):
    """Steady jobs teach a time they are done by: a poll or two, soon after the end.

    The model (tests/test_pacing.py) holds steady jobs to 1.5 polls a job exactly: a round
    polled at the top, then one that probes below it. Here the polls are real requests on
    a machine that may be busy: one that reaches Ember a few milliseconds sooner than the
    last finds the job still running and costs a second poll. So the bound is taken over
    six rounds, and allows three such strays in twelve jobs; a worker that asked twice
    about every job (blurred lessons) or every interval (none) fails it.
    """
    fake = TimedEmber(ember)
    plan(subject, candidates=8)
    plan(subject, candidates=8)

    drain(timed_worker(slots=2))  # eight rounds of two jobs of the same length

    later = list(fake.ends)[4:]  # six rounds after two to learn from
    polls = [len(fake.polls[job_id]) for job_id in later]
    late = [fake.seen_late(job_id) for job_id in later]
    assert sum(polls) / len(polls) <= 1.75, f"polls per job in the six rounds after two: {polls}"
    # Polling from a "still running" time sees a job half an interval late on average.
    assert sum(late) / len(late) <= INTERVAL / 2, (
        f"seen {[round(s, 3) for s in late]} s after their ends (interval {INTERVAL} s)"
    )


def test_it_starts_a_provider_it_has_not_seen_from_what_jobs_of_that_kind_take(subject, ember):
    fake = TimedEmber(ember)
    plan(subject, candidates=2)
    worker = timed_worker(slots=2)
    drain(worker)  # the worker learns how long openai's images take

    plan(subject, candidates=2, providers=("flux",))
    drain(worker)

    per_job = [len(fake.polls[job_id]) for job_id in fake.ends]
    assert max(per_job[2:]) <= 3, f"polls per job, openai's two first: {per_job}"


def test_it_sees_a_job_that_ends_earlier_than_the_ones_before_within_one_interval(subject, ember):
    # The third job ends a little earlier than the two the worker learned from.
    fake = TimedEmber(ember, durations={3: JOB_SECONDS - 0.5 * INTERVAL})
    plan(subject, candidates=3)

    drain(timed_worker(slots=2))

    early = list(fake.ends)[2]
    assert fake.seen_late(early) <= INTERVAL + MARGIN, (
        f"seen {fake.seen_late(early):.3f} s after it ended; polls at "
        f"{[round(t - fake.ends[early], 3) for t in fake.polls[early]]} s from its end"
    )


def test_it_learns_nothing_from_a_job_found_running_long_after_its_submit(subject, ember):
    fake = TimedEmber(ember, durations={1: 1.0})
    [resumed, *fresh] = plan(subject, candidates=3)
    # A dead worker's job, sent a few seconds ago and still running: how long it spent in
    # Ember's queue while nobody watched says nothing about how long such jobs take.
    async_to_sync(fake_submit)(resumed)
    before_the_restart = timezone.now() - timedelta(seconds=3)
    move(resumed, TaskState.RUNNING, ember_job_id="job_1", submitted_at=before_the_restart)
    tomorrow = timezone.now() + timedelta(days=1)
    Task.objects.filter(pk__in=[t.pk for t in fresh]).update(next_attempt_at=tomorrow)
    worker = timed_worker(slots=2)
    worker.poll_bound = 6  # a wrong lesson shows within seconds, not half an hour
    drain(worker)  # only the resumed job is due

    Task.objects.filter(pk__in=[t.pk for t in fresh]).update(next_attempt_at=timezone.now())
    drain(worker)

    assert len(fake.polls["job_1"]) > 1, "the resumed job was seen running, then ended"
    # The wrong lesson, "such jobs take 4 s", would first ask about these 0.6 s jobs after
    # about 4 s, seeing them over 3 s late: a bound of 1 s tells the two apart with room
    # for a busy machine (CI saw 0.21 s against a bound of 0.2 s).
    for job_id in ("job_2", "job_3"):
        assert fake.seen_late(job_id) <= 1.0, (
            f"{job_id} was seen {fake.seen_late(job_id):.3f} s after it ended (bound 1 s)"
        )


async def fake_submit(task: Task) -> None:
    """Make the submit a dead worker made before it could record it."""
    client = EmberClient()
    try:
        await client.submit(
            {"source_metadata": {"task_id": str(task.pk)}, "provider": "openai", "model": None}
        )
    finally:
        await client.aclose()
