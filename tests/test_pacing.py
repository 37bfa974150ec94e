"""When the worker asks Ember about a job, as a model: `Pacing` against jobs of known length.

Each job is followed as the worker follows it (steps.py): the plan's first poll, its
second if any, then every interval, in seconds after Ember accepted the job. A job
is asked about for nothing while it runs; it is seen late by the time between its
end and the poll that finds it done.
"""

from dataclasses import dataclass

from hypothesis import assume, given
from hypothesis import strategies as st

from studio.worker.pacing import CLOSEST, Pacing

KIND = ("openai", "image")
INTERVALS = st.sampled_from([0.1, 0.5, 3.0])


@dataclass
class Followed:
    polls: int
    late: float  # seconds between the job's end and the poll that saw it done
    running_floor: float | None  # the "still running" time the plan was based on


def follow(pacing: Pacing, ends: list[float], kind=KIND, earliest: float = 0.0) -> list[Followed]:
    """Follow jobs that ran side by side (one plan), ending `ends` seconds in; teach each.

    `earliest`: no poll goes out before it (the worker records Ember's acceptance first).
    """
    plan = pacing.plan(kind)
    assert plan.first >= 0, plan
    for before, after in zip(plan.polls(), plan.then, strict=False):
        assert before < after <= before + pacing.interval, plan
    followed = []
    for end in ends:
        times = plan.polls()
        asked, last_running, count = 0.0, None, 0
        while True:
            asked = max(earliest, times.pop(0) if times else asked + pacing.interval)
            count += 1
            if asked >= end:
                break
            last_running = asked
        pacing.learn(kind, plan, last_running, asked)
        floor = None if plan.basis is None else plan.basis.running
        followed.append(Followed(count, asked - end, floor))
    return followed


def warm_up_rounds(length: float, interval: float) -> int:
    """Return how many rounds of steady jobs narrow a bracket of one interval down."""
    return 4 + int(length / interval).bit_length()


def rounds(pacing: Pacing, ends: list[float], slots: int) -> list[Followed]:
    """Follow `ends` in rounds of `slots` jobs side by side."""
    return [
        f
        for start in range(0, len(ends), slots)
        for f in follow(pacing, ends[start : start + slots])
    ]


@given(
    interval=INTERVALS,
    length=st.floats(min_value=0.05, max_value=60),
    slots=st.sampled_from([1, 2, 4, 16]),
)
def test_jobs_of_a_steady_length_are_asked_about_about_once_and_seen_soon(interval, length, slots):
    pacing = Pacing(interval)
    warm_up = warm_up_rounds(length, interval)
    followed = rounds(pacing, [length] * slots * (warm_up + 8), slots)

    later = followed[slots * warm_up :]
    polls = sum(f.polls for f in later) / len(later)
    assert polls <= 1.5, f"{polls:.2f} polls a job once learned: {[f.polls for f in later]}"
    worst = max(f.late for f in later)
    assert worst <= pacing.narrow + 1e-9, (
        f"seen up to {worst:.3f} s late, interval {interval} s (narrow {pacing.narrow:.3f} s)"
    )


@given(
    interval=INTERVALS,
    ends=st.lists(st.floats(min_value=0.01, max_value=30), min_size=1, max_size=40),
    slots=st.sampled_from([1, 3]),
)
def test_a_job_no_faster_than_one_seen_running_is_seen_within_an_interval_of_its_end(
    interval, ends, slots
):
    pacing = Pacing(interval)
    followed = rounds(pacing, ends, slots)

    # A job faster than every one seen running may be found at a first poll that was
    # planned for slower ones; any other is asked about at least once an interval.
    late = [
        (round(f.late, 3), f.running_floor)
        for f, end in zip(followed, ends, strict=True)
        if f.running_floor is not None and end >= f.running_floor and f.late > interval + 1e-9
    ]
    assert not late, f"seen late (s, after a job ran past s), interval {interval} s: {late}"


def test_one_slow_job_does_not_make_the_next_ones_wait():
    pacing = Pacing(0.1)
    rounds(pacing, [1.0] * 10, 1)

    followed = rounds(pacing, [1.0, 1.8, 1.01, 0.99, 1.0], 1)

    late = [round(f.late, 3) for f in followed]
    assert max(late) <= 0.1 + 1e-9, f"seen late (s), job by job, interval 0.1 s: {late}"


@given(
    interval=st.sampled_from([0.1, 0.5]),
    before=st.floats(min_value=1, max_value=20),
    faster=st.floats(min_value=0.05, max_value=0.9),
)
def test_jobs_that_got_faster_are_seen_soon_again_within_a_few_jobs(interval, before, faster):
    pacing = Pacing(interval)
    rounds(pacing, [before] * 20, 1)
    now = before * faster

    followed = rounds(pacing, [now] * 40, 1)

    # The widening below a narrow bracket doubles: it reaches any drop in a number of
    # jobs that grows with the drop's logarithm.
    catch_up = 2 * (int((before - now) / CLOSEST).bit_length() + 4)
    settled = followed[catch_up:]
    worst = max(f.late for f in settled)
    assert worst <= pacing.narrow + 1e-9, (
        f"jobs {before:.2f} s -> {now:.2f} s: still seen {worst:.3f} s late after {catch_up} "
        f"jobs; lateness job by job {[round(f.late, 3) for f in followed]}"
    )


@given(length=st.floats(min_value=0.1, max_value=10), slots=st.integers(2, 16))
def test_jobs_that_ran_side_by_side_teach_what_one_of_them_teaches(length, slots):
    alone, together = Pacing(0.1), Pacing(0.1)
    for _ in range(6):
        follow(alone, [length])
        follow(together, [length] * slots)
        assert together.plan(KIND) == alone.plan(KIND)


def test_a_provider_not_seen_yet_starts_from_its_kinds_jobs_at_other_providers():
    pacing = Pacing(0.1)
    rounds(pacing, [2.0] * 6, 1)

    [first] = follow(pacing, [2.0], kind=("flux", "image"))

    assert first.polls <= 2 and first.late <= 0.1, first
    assert Pacing(0.1).plan(("flux", "image")).first == 0.1, "nothing known: one interval in"


@given(
    interval=INTERVALS,
    length=st.floats(min_value=0.05, max_value=60),
    jitter=st.floats(min_value=0, max_value=0.1),
    seeds=st.lists(st.floats(min_value=-1, max_value=1), min_size=40, max_size=40),
)
def test_jobs_of_a_length_that_wavers_a_little_are_seen_soon_not_an_interval_late(
    interval, length, jitter, seeds
):
    """A job ending a hair past the top is likely just past it: seen soon, not an interval on."""
    pacing = Pacing(interval)
    wavering = jitter * interval  # each job ends up to 10% of an interval either side
    warm_up = warm_up_rounds(length, interval)
    ends = [length + wavering * seed for seed in seeds]
    followed = rounds(pacing, [length] * warm_up + ends, 1)

    late = [f.late for f in followed[warm_up:]]
    assert max(late) <= pacing.narrow + 2 * wavering + 1e-9, (
        f"jobs of {length:.2f} s, give or take {wavering:.3f} s, interval {interval} s, "
        f"narrow {pacing.narrow:.3f} s: seen late (s) {[round(s, 3) for s in late]}"
    )


@given(
    interval=INTERVALS,
    length=st.floats(min_value=0.05, max_value=60),
    stall=st.floats(min_value=0.01, max_value=5),
)
def test_a_poll_that_went_out_late_does_not_make_the_next_jobs_late(interval, length, stall):
    """A busy machine sends one poll late: the job is seen late, the ones after it are not."""
    pacing = Pacing(interval)
    rounds(pacing, [length] * warm_up_rounds(length, interval), 1)
    plan = pacing.plan(KIND)
    assume(plan.first + stall >= length)  # the first poll, held up, finds the job done
    pacing.learn(KIND, plan, None, plan.first + stall)

    late = [f.late for f in rounds(pacing, [length] * 4, 1)]
    assert max(late) <= pacing.narrow + 1e-9, (
        f"jobs of {length:.2f} s, interval {interval} s, after one poll {stall:.2f} s late: "
        f"seen late (s) {[round(s, 3) for s in late]}"
    )


@given(
    interval=st.sampled_from([0.05, 0.1, 0.5, 3.0]),
    floor=st.floats(min_value=0.001, max_value=0.5),
    share=st.floats(min_value=0, max_value=1),
)
def test_jobs_done_before_the_worker_can_ask_are_asked_about_as_soon_as_it_can(
    interval, floor, share
):
    """Found by profiling the engine row of `make bench`: with jobs that end at once, the
    first lesson's top (14 ms after the submit) stayed the plan for ever, a bracket widened
    below but held at 0 and so never probed; each task slept 9 ms for nothing."""
    pacing = Pacing(interval)
    length = share * floor  # done before the worker could have asked
    warm = rounds_with_floor(pacing, [length] * 40, floor)

    followed = rounds_with_floor(pacing, [length] * 8, floor)

    waits = [round(f.late + length - floor, 4) for f in followed]  # asked after it could
    assert max(waits) <= CLOSEST, (
        f"jobs of {length * 1000:.1f} ms that the worker can first ask about "
        f"{floor * 1000:.1f} ms in, interval {interval} s: asked (ms after it could) "
        f"{[w * 1000 for w in waits]}; while learning {[round(f.late, 4) for f in warm]}"
    )
    assert all(f.polls == 1 for f in followed), [f.polls for f in followed]


def rounds_with_floor(pacing: Pacing, ends: list[float], floor: float) -> list[Followed]:
    return [f for end in ends for f in follow(pacing, [end], earliest=floor)]
