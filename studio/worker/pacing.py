"""When to ask Ember about a running job (docs/design.md §6.6).

A poll sent while the job cannot be done yet is a request spent for nothing, and
one sent late keeps a finished job (and its slot) waiting. So the worker keeps, in
memory, a bracket for each provider's jobs of each kind: a time after their submit
went out that such jobs were still running at, and one they were done by.
While the bracket is wide, a job's first poll probes its middle and the second
goes to its top, which narrows it either way; once it is narrow the first poll
goes to its top. A job still running at the top is asked about again a little
later (it is likely just past it), and from there on every interval.
"""

from dataclasses import dataclass

CLOSEST = 0.01  # seconds: the least a narrow bracket is widened by
NARROW_SHARE = 0.3  # of the interval: a bracket this narrow (or 20 ms) is not probed

Kind = tuple[str, str]  # (provider, task kind)
ANY_PROVIDER = ""  # the provider part of a kind's estimate over all providers


@dataclass(frozen=True)
class Bracket:
    """Seconds after their submit went out: such jobs still ran at `running`, done by `done`."""

    running: float
    done: float
    # How far below its top the bracket was last widened after a job done at that top
    # (0 since a job ran past a first poll): each such widening doubles it.
    drop: float = 0.0


@dataclass(frozen=True)
class Plan:
    """When to poll one job, in seconds after its submit went out, and what that was based on."""

    first: float
    then: tuple[float, ...]  # the polls after the first, before the interval takes over
    basis: Bracket | None  # the bracket the plan came from (None: nothing known yet)
    probe: bool = False  # whether the first poll probes the middle of the bracket

    def polls(self) -> list[float]:
        """Return the planned polls, in order; after them, one every interval."""
        return [self.first, *self.then]


class Pacing:
    """Learn when jobs of each provider and kind end, from the jobs seen ending."""

    def __init__(self, interval: float) -> None:
        """Start knowing nothing: a job is first asked about one interval in."""
        self.interval = interval
        self.narrow = max(2 * CLOSEST, NARROW_SHARE * interval)
        self._brackets: dict[Kind, Bracket] = {}

    def plan(self, kind: Kind) -> Plan:
        """Return when to poll a job of `kind` before the interval takes over.

        A provider not seen yet starts from its kind's bracket at any provider.
        """
        basis = self._brackets.get(kind) or self._brackets.get((ANY_PROVIDER, kind[1]))
        if basis is None:
            return Plan(self.interval, (), None)
        width = basis.done - basis.running
        just_past = basis.done + self.narrow  # a job not done by the top is likely just past it
        # Widened below by jobs done at its top, a bracket that reached 0 cannot widen on:
        # narrow or not, it is probed, or jobs done at once would keep their first top.
        if width <= self.narrow and not (basis.drop and basis.running == 0):
            return Plan(basis.done, (just_past,), basis)
        # A job just past the "running" time is still asked about within an interval.
        middle = basis.running + min(width / 2, self.interval)
        if middle + self.interval < basis.done:
            return Plan(middle, (middle + self.interval,), basis, probe=True)
        return Plan(middle, (basis.done, just_past), basis, probe=True)

    def learn(self, kind: Kind, plan: Plan, last_running: float | None, seen_done: float) -> None:
        """Take in a job of `kind`, followed by `plan`, that ended.

        `last_running` is when a poll last saw it running (None: done at its first
        poll) and `seen_done` when a poll first saw it done, in seconds after its
        submit went out. The first lesson drawn from a bracket replaces it; a lesson of
        a job that ran beside it, on the same plan (or an older one), only widens the
        new bracket, so jobs that ran side by side do not compound.
        """
        lesson = self._lesson(plan, last_running, seen_done)
        for key in (kind, (ANY_PROVIDER, kind[1])):
            current = self._brackets.get(key)
            if current is None or current == plan.basis:
                self._brackets[key] = lesson
            else:
                self._brackets[key] = Bracket(
                    max(current.running, lesson.running),
                    max(current.done, lesson.done),
                    max(current.drop, lesson.drop),
                )

    def _lesson(self, plan: Plan, last_running: float | None, seen_done: float) -> Bracket:
        """Return the bracket one job teaches on its own.

        Seen running first: it ran past that poll and was done by the next. Done at its
        first poll: a probe moves the top down to it; a job done at the top of a
        narrow bracket widens the bracket below, twice as far as the last time, so a
        kind of job that got faster is found out within a few jobs. Seen done past the
        top but never seen running at it (a poll that went out late, on a busy machine),
        it says nothing against the top, which stays.
        """
        basis = plan.basis
        if basis is not None and (last_running is None or last_running < basis.done):
            seen_done = min(seen_done, basis.done)
        if last_running is not None:
            if basis is not None and last_running >= basis.done:
                # Slower than the jobs before: it may be the one slow job, so the
                # "running" time stays, and the next jobs probe up from it.
                return Bracket(basis.running, seen_done)
            return Bracket(last_running, seen_done)
        if basis is None:
            return Bracket(max(0.0, seen_done - self.interval), seen_done)
        if plan.probe and not basis.drop:  # done: the middle is the new top
            return Bracket(basis.running, seen_done)
        # Done at the top of a narrow bracket, or at a probe below a widening: look twice
        # as far below.
        drop = 2 * max(basis.done - basis.running, basis.drop, CLOSEST / 2)
        # No further than 0: a drop past the top would only double on, unbounded.
        drop = min(drop, max(seen_done, CLOSEST / 2))
        return Bracket(max(0.0, seen_done - drop), seen_done, drop)


# A clip whose answer was lost is sent again under its key (free: one job, one charge).
RESEND_FIRST = 2.0  # seconds before the first time
RESEND_MOST = 60.0  # seconds: the longest wait between two sends


def resend_delay(since_first: float) -> float:
    """Return the seconds before a clip is sent again, `since_first` seconds after its key
    was first sent: 2 at first, then a quarter of that time, at most a minute. Every 2 s
    until the poll bound, a review's clips whose answers kept getting lost were sent about
    275 times each, with their reference photos."""
    return min(max(RESEND_FIRST, since_first / 4), RESEND_MOST)
