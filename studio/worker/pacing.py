"""When to ask Ember about a running job (docs/design.md §6.6).

A poll sent while the job cannot be done yet is a request spent for nothing, and
one sent late keeps a finished job (and its slot) waiting. So the worker learns,
in memory, two times for each provider's jobs of each kind: one they are still
running at, and one they are done by. A job's first poll goes out at the second;
from there on it is polled every interval.
"""

from datetime import datetime

from django.utils import timezone

SLOWER_WEIGHT = 0.3  # share of a slower job's extra time an estimate takes on (an EWMA)
STEP_BACK = 0.25  # share of the estimate taken off when a job was already done at its first poll
GROWTH = 1.3  # a slower job moves the "running" estimate at most this far past its own first poll
CLOSEST = 0.01  # seconds: the "done by" time comes no closer than this to the "running" one

Kind = tuple[str, str]  # (provider, task kind)
ANY_PROVIDER = ""  # the provider part of a kind's estimate over all providers


class Pacing:
    """Estimate how long jobs of each provider and kind run, from the jobs seen ending."""

    def __init__(self, interval: float) -> None:
        """Start with no estimates: a job is first asked about one interval in."""
        self.interval = interval
        # Only jobs submitted from now on teach: one a dead worker left behind spent
        # an unknown part of its time unwatched.
        self.since = timezone.now()
        self._running: dict[Kind, float] = {}  # seconds after the submit such jobs still run
        self._done: dict[Kind, float] = {}  # seconds after the submit such jobs are done by

    def first_poll(self, kind: Kind) -> float:
        """Return how many seconds after its submit to ask about a job of `kind` first.

        The time such jobs are done by, or else one they still run at; a provider
        not seen yet starts from what its kind's jobs take at any provider.
        """
        for key in (kind, (ANY_PROVIDER, kind[1])):
            for estimates in (self._done, self._running):
                if (seconds := estimates.get(key)) is not None:
                    return seconds
        return self.interval

    def learn(
        self,
        kind: Kind,
        submitted_at: datetime,
        planned: float,
        last_running: datetime | None,
        seen_done: datetime,
    ) -> None:
        """Take in a job of `kind` that ended, first polled `planned` seconds after its submit.

        `last_running` is when a poll last saw it running (None: done at its first
        poll), `seen_done` when a poll first saw it done. Jobs that ran side by side
        were scheduled alike, so their lessons do not compound: the "running" time
        and a step back of the "done by" time are taken from the job's own first
        poll, and a step forward never goes past when the job was seen done.
        """
        if submitted_at < self.since:
            return
        running = None if last_running is None else (last_running - submitted_at).total_seconds()
        done = (seen_done - submitted_at).total_seconds()
        for key in (kind, (ANY_PROVIDER, kind[1])):
            if running is not None or key not in self._done:
                # A job done at a first poll sent at the "done by" time says nothing of
                # how long such jobs run at least.
                self._running[key] = self._next_running(key, planned, running)
            self._done[key] = self._next_done(key, planned, running, done)

    def _next_running(self, key: Kind, planned: float, seconds: float | None) -> float:
        """Return the "still running at" time for `key` after a job that ran at least `seconds`.

        The first of its kind and a faster one are believed at once; a slower one
        moves the estimate part of the way (an EWMA), by at most 30% over the job's
        own first poll. A job already done at its first poll (None) ended at some
        unknown earlier time: the estimate moves a quarter (at least an interval)
        before that job's first poll.
        """
        current = self._running.get(key)
        if seconds is None:
            earlier = max(0.0, planned - max(self.interval, STEP_BACK * planned))
            return earlier if current is None else min(current, earlier)
        if current is None or seconds < current:
            return seconds
        return min(current + SLOWER_WEIGHT * (seconds - current), max(current, GROWTH * planned))

    def _next_done(self, key: Kind, planned: float, running: float | None, done: float) -> float:
        """Return the "done by" time for `key` after a job last seen running at `running`.

        Done at its first poll: such jobs may end earlier still, so the next first
        poll goes halfway back towards the "running" time (never closer than
        CLOSEST to it). Seen running first: the job took longer than planned, so the
        estimate moves 30% of the way towards when it was seen done (all of it for
        the first of its kind or a job done sooner).
        """
        current = self._done.get(key)
        low = self._running[key]
        if running is None:
            earlier = max(low + CLOSEST, planned - (planned - low) / 2)
            return earlier if current is None else min(current, earlier)
        if current is None or done < current:
            return done
        return max(low + CLOSEST, current + SLOWER_WEIGHT * (done - current))
