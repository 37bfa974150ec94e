"""A batch refused by the daily cap says when it would fit: the seconds until enough of the
tasks counted against it are more than a window old (the API's Retry-After)."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from studio import engine
from studio.engine import planning
from studio.models import Task
from tests.factories import batch_request

pytestmark = pytest.mark.django_db

WINDOW = timedelta(hours=engine.SPEND_WINDOW_HOURS)


def plan_aged(subject, user: User, ages: list[timedelta]) -> None:
    """Plan one task of `user`'s for each age, created that long ago."""
    for age in ages:
        batch = engine.generate(request=batch_request(subject), user=user)
        Task.objects.filter(batch=batch).update(created_at=timezone.now() - age)


def refusal(subject, user: User, more: int) -> engine.SpendCapReached:
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": more}])
    with pytest.raises(engine.SpendCapReached) as refused:
        engine.generate(request=request, user=user)
    return refused.value


def test_it_waits_for_the_task_whose_leaving_makes_room_not_the_oldest(subject, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    user = User.objects.create_user("family-script")
    plan_aged(subject, user, [timedelta(hours=20)] * 5 + [timedelta(hours=10)] * 3)
    plan_aged(subject, user, [timedelta(hours=1)] * 2)

    refused = refusal(subject, user, more=6)

    # 10 + 6 is 6 past 10: the five 20 hours old leave in 4 hours, the sixth in 14.
    assert refused.retry_after is not None
    assert 14 * 3600 - 60 < refused.retry_after <= 14 * 3600, refused.retry_after
    assert str(refused).endswith(
        "this batch would make 6 more and the daily limit is 10. "
        "It fits in about 14 hours, when earlier tasks leave the window."
    ), str(refused)


def test_it_counts_in_minutes_under_two_hours(subject, settings):
    settings.AVATARS_DAILY_TASK_CAP = 2
    user = User.objects.create_user("family-script")
    plan_aged(subject, user, [WINDOW - timedelta(minutes=45), timedelta(hours=1)])

    refused = refusal(subject, user, more=1)

    assert refused.retry_after is not None and refused.retry_after <= 45 * 60
    assert str(refused).endswith(
        "It fits in about 45 minutes, when earlier tasks leave the window."
    )


def test_a_batch_larger_than_the_cap_is_told_it_never_fits(subject, settings):
    settings.AVATARS_DAILY_TASK_CAP = 5
    user = User.objects.create_user("family-script")

    refused = refusal(subject, user, more=6)

    assert refused.retry_after is None, "no wait makes 6 fit under 5"
    assert str(refused) == (
        "You have planned 0 paid tasks in the last 24 hours; this batch would make 6 more "
        "and the daily limit is 5. A batch of 6 tasks is larger than the limit: plan fewer "
        "at a time."
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    minutes=st.lists(st.integers(min_value=1, max_value=24 * 60 - 2), min_size=1, max_size=8),
    cap=st.integers(min_value=1, max_value=8),
    more=st.integers(min_value=1, max_value=8),
)
def test_the_wait_is_the_least_after_which_the_batch_fits(subject, settings, minutes, cap, more):
    """Counted as the cap counts: after `retry_after` seconds the batch fits, a few seconds
    before that it does not."""
    settings.AVATARS_DAILY_TASK_CAP = 0  # planned past the cap: this is what was planned
    user, _ = User.objects.get_or_create(username="family-script")
    Task.objects.filter(batch__created_by=user).delete()
    plan_aged(subject, user, [timedelta(minutes=m) for m in minutes])
    settings.AVATARS_DAILY_TASK_CAP = cap
    if len(minutes) + more <= cap:
        return  # it fits now: nothing to wait for
    refused = refusal(subject, user, more)
    now = timezone.now()

    def fits_after(seconds: float) -> bool:
        since = now + timedelta(seconds=seconds) - WINDOW
        return planning._tasks_planned_since(user, since) + more <= cap

    if more > cap:
        assert refused.retry_after is None
        return
    assert refused.retry_after is not None
    assert fits_after(refused.retry_after), f"still full after {refused.retry_after} s"
    assert not fits_after(refused.retry_after - 5), f"fits before {refused.retry_after} s"
