"""When to ask Ember about a running job (docs/design.md §6.6).

A poll sent while the job cannot be done yet is a request spent for nothing: with
many slots those requests are most of what the worker and Ember do. So the worker
learns, in memory, how long each provider's jobs of each kind run at least, and
sends a job's first poll then; from there on it polls every interval.
"""

from datetime import datetime

from django.utils import timezone

SLOWER_WEIGHT = 0.3  # share of a slower job's extra time the estimate takes on (an EWMA)
STEP_BACK = 0.25  # share of the estimate taken off when a job was already done at its first poll
GROWTH = 1.3  # a slower job moves the estimate at most this far past its own first poll

Kind = tuple[str, str]  # (provider, task kind)
ANY_PROVIDER = ""  # the provider part of a kind's estimate over all providers


class Pacing:
    """Estimate how long jobs of each provider and kind run, from the jobs seen ending."""

    def __init__(self, interval: float) -> None:
        """Start every estimate at `interval`: a job is first asked about one interval in."""
        self.interval = interval
        # Only jobs submitted from now on teach: one a dead worker left behind spent
        # an unknown part of its time unwatched.
        self.since = timezone.now()
        self._expected: dict[Kind, float] = {}

    def first_poll(self, kind: Kind) -> float:
        """Return how many seconds after its submit to ask about a job of `kind` first.

        A provider not seen yet starts from what its kind's jobs take at any provider.
        """
        for key in (kind, (ANY_PROVIDER, kind[1])):
            if (seconds := self._expected.get(key)) is not None:
                return seconds
        return self.interval

    def learn(
        self,
        kind: Kind,
        submitted_at: datetime,
        planned: float,
        last_running: datetime | None,
    ) -> None:
        """Take in a job of `kind` that ended, first polled `planned` seconds after its submit.

        `last_running` is when a poll last saw it running: the estimate is a time
        such jobs are still running at. The first of its kind, and a faster one, are
        believed at once; a slower one moves the estimate part of the way (an EWMA),
        by at most 30% over the job's own first poll. A job already done at its first
        poll (`last_running` None) ended at some unknown earlier time: the first poll
        moves a quarter (at least an interval) before that job's. Jobs that ran side by
        side were scheduled alike, so their lessons do not compound.
        """
        if submitted_at < self.since:
            return
        seconds = None if last_running is None else (last_running - submitted_at).total_seconds()
        for key in (kind, (ANY_PROVIDER, kind[1])):
            self._expected[key] = self._next(key, planned, seconds)

    def _next(self, key: Kind, planned: float, seconds: float | None) -> float:
        """Return the estimate for `key` after a job that ran at least `seconds` (None: unknown)."""
        current = self._expected.get(key)
        if seconds is None:
            earlier = max(0.0, planned - max(self.interval, STEP_BACK * planned))
            return earlier if current is None else min(current, earlier)
        if current is None or seconds < current:
            return seconds
        return min(current + SLOWER_WEIGHT * (seconds - current), max(current, GROWTH * planned))
