"""generate() bounds spending: tasks per batch, the catalogue, the daily cap, reference photos."""

import contextlib
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from studio import engine
from studio.engine import InvalidRequest, planning
from studio.models import Asset, Attempt, Batch, BatchKey, Task, TaskState
from tests.factories import batch_request
from tests.planned import nothing_created

pytestmark = pytest.mark.django_db


@pytest.fixture
def many_providers(settings):
    """A catalogue of 26 providers, so that a batch can ask for more than 200 tasks."""
    settings.AVATARS_PROVIDERS = {
        f"p{i:02d}": {"label": f"Provider {i}", "model": f"model-{i}"} for i in range(26)
    }
    return sorted(settings.AVATARS_PROVIDERS)


# --- two hundred tasks at most -------------------------------------------------


def test_it_accepts_exactly_two_hundred_tasks(subject, many_providers):
    providers = [{"provider": name, "candidates": 8} for name in many_providers[:25]]

    batch = engine.generate(request=batch_request(subject, providers=providers))

    assert batch.tasks.count() == 200


def test_it_refuses_more_than_two_hundred_tasks(subject, many_providers):
    providers = [{"provider": name, "candidates": 8} for name in many_providers]

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, providers=providers))

    assert str(refused.value) == "This batch would make 208 tasks; the limit is 200."
    assert nothing_created()


# --- spending is bounded --------------------------------------------------------


@pytest.fixture
def family(db: None) -> User:
    return User.objects.create_user("family-script")


def planned_for(user: User) -> int:
    return Task.objects.filter(batch__created_by=user).count()


def test_it_refuses_more_tasks_than_the_batch_setting_allows(subject, settings):
    settings.AVATARS_MAX_TASKS_PER_BATCH = 10
    providers = [{"provider": name, "candidates": 4} for name in ("openai", "flux", "google")]

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, providers=providers))

    assert str(refused.value) == "This batch would make 12 tasks; the limit is 10.", "cap 10"
    assert nothing_created()


def test_it_accepts_a_batch_exactly_at_the_batch_setting(subject, settings):
    settings.AVATARS_MAX_TASKS_PER_BATCH = 12
    providers = [{"provider": name, "candidates": 4} for name in ("openai", "flux", "google")]

    batch = engine.generate(request=batch_request(subject, providers=providers))

    assert batch.tasks.count() == 12, "a batch of exactly the cap (12) is planned"


@pytest.mark.parametrize(
    ("providers", "message"),
    [
        pytest.param(
            [{"provider": "flux", "model": "flux-max", "candidates": 1}],
            'Unknown model for provider "flux": "flux-max". Its models are flux-dev, flux-pro.',
            id="unknown-model",
        ),
        pytest.param(
            [{"provider": "openai", "model": f"model-{i}", "candidates": 8} for i in range(7)],
            'Unknown model for provider "openai": "model-0". Its models are gpt-image-1.',
            id="made-up-models",
        ),
        pytest.param(
            [
                {"provider": "flux", "model": "flux-dev", "candidates": 5},
                {"provider": "flux", "model": "flux-pro", "candidates": 4},
            ],
            'Provider "flux" has 9 candidates across its rows; the limit is 8 per provider.',
            id="candidates-split-by-model",
        ),
        pytest.param(
            [
                {"provider": "flux", "candidates": 8},
                {"provider": "openai", "candidates": 1},
                {"provider": "flux", "model": "flux-pro", "candidates": 1},
            ],
            'Provider "flux" has 9 candidates across its rows; the limit is 8 per provider.',
            id="candidates-split-around-another-provider",
        ),
    ],
)
def test_it_refuses_models_and_candidates_beyond_the_catalogue(subject, providers, message):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, providers=providers))

    assert str(refused.value) == message, "models from the catalogue, at most 8 per provider"
    assert nothing_created()


def test_it_accepts_eight_candidates_of_one_provider_split_over_its_models(subject):
    providers = [
        {"provider": "flux", "model": "flux-dev", "candidates": 4},
        {"provider": "flux", "model": "flux-pro", "candidates": 4},
    ]

    batch = engine.generate(request=batch_request(subject, providers=providers))

    assert (
        sorted(batch.tasks.values_list("model", flat=True)) == ["flux-dev"] * 4 + ["flux-pro"] * 4
    ), "8 candidates for one provider is the limit, not past it"


def test_it_refuses_a_batch_that_would_pass_the_users_daily_cap(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": 8}]),
        user=family,
    )

    with pytest.raises(engine.SpendCapReached) as refused:
        engine.generate(
            request=batch_request(subject, providers=[{"provider": "flux", "candidates": 3}]),
            user=family,
        )

    assert str(refused.value) == (
        "You have planned 8 paid tasks in the last 24 hours; "
        "this batch would make 3 more and the daily limit is 10. "
        "It fits in about 24 hours, when earlier tasks leave the window."
    ), "8 planned + 3 > 10; the first of the eight leaves the window in 24 hours"
    assert isinstance(refused.value, InvalidRequest)
    assert (refused.value.planned, refused.value.more, refused.value.limit) == (8, 3, 10)
    assert planned_for(family) == 8


def test_it_plans_up_to_the_daily_cap_exactly(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    for candidates in (8, 2):
        engine.generate(
            request=batch_request(
                subject, providers=[{"provider": "openai", "candidates": candidates}]
            ),
            user=family,
        )

    assert planned_for(family) == 10, "8 + 2 reach the cap of 10 without passing it"


def test_a_task_cancelled_before_anything_was_sent_is_not_a_paid_task(subject, family, settings):
    """The cap is on paid tasks (found by a review: a batch cancelled in time was counted,
    and its person told of "paid tasks" Ember never saw). One sent, then cancelled, counts."""
    settings.AVATARS_DAILY_TASK_CAP = 10
    first = engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": 8}]),
        user=family,
    )
    sent = first.tasks.order_by("ordinal").first()
    Attempt.objects.create(
        task=sent, number=1, submitted_at=timezone.now(), outcome=Attempt.Outcome.UNKNOWN
    )
    engine.cancel_batch(batch=first)  # the seven never sent
    Task.objects.filter(pk=sent.pk).update(state=TaskState.CANCELLED, next_attempt_at=None)
    assert first.tasks.filter(state=TaskState.CANCELLED).count() == 8

    engine.generate(
        request=batch_request(subject, providers=[{"provider": "flux", "candidates": 8}]),
        user=family,
    )
    with pytest.raises(engine.SpendCapReached) as refused:
        engine.generate(
            request=batch_request(subject, providers=[{"provider": "google", "candidates": 2}]),
            user=family,
        )

    assert (refused.value.planned, refused.value.more) == (9, 2), "8 new and the one sent"


def test_it_forgets_tasks_planned_more_than_24_hours_ago(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    old = engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": 8}]),
        user=family,
    )
    day_ago = timezone.now() - timedelta(hours=24, seconds=1)
    Batch.objects.filter(pk=old.pk).update(created_at=day_ago)
    old.tasks.update(created_at=day_ago)

    batch = engine.generate(
        request=batch_request(subject, providers=[{"provider": "flux", "candidates": 8}]),
        user=family,
    )

    assert batch.tasks.count() == 8, "8 tasks from 24 h ago no longer count toward 10"


def test_it_keeps_each_users_daily_cap_apart_and_leaves_internal_batches_uncapped(
    subject, family, settings
):
    settings.AVATARS_DAILY_TASK_CAP = 10
    eight = batch_request(subject, providers=[{"provider": "openai", "candidates": 8}])
    engine.generate(request=eight, user=family)
    engine.generate(request=eight)  # an internal caller: no user, no cap
    engine.generate(request=eight)

    other = engine.generate(request=eight, user=User.objects.create_user("grace"))

    assert other.tasks.count() == 8, "another user's 8 and internal batches count for nobody"
    assert Task.objects.count() == 32


def test_it_turns_the_daily_cap_off_at_zero(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 0
    eight = batch_request(subject, providers=[{"provider": "openai", "candidates": 8}])

    for _ in range(3):
        engine.generate(request=eight, user=family)

    assert planned_for(family) == 24, "a cap of 0 plans 24 tasks and more"


def test_it_refuses_a_keyed_batch_past_the_daily_cap_and_records_no_key(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    eight = batch_request(subject, providers=[{"provider": "openai", "candidates": 8}])
    first = engine.generate(request=eight, user=family, key="k-1")

    with pytest.raises(engine.SpendCapReached):
        engine.generate(request=eight, user=family, key="k-2")

    again = engine.generate(request=eight, user=family, key="k-1")  # a retry plans nothing
    assert again.pk == first.pk
    assert planned_for(family) == 8, "8 planned, 16 would pass the cap of 10"
    assert not BatchKey.objects.filter(key="k-2").exists()


@pytest.mark.django_db(transaction=True)
def test_it_lets_one_of_two_concurrent_batches_under_the_daily_cap(subject, settings, monkeypatch):
    settings.AVATARS_DAILY_TASK_CAP = 10
    user = User.objects.create_user("family-script")
    engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": 4}]),
        user=user,
    )
    six = batch_request(subject, providers=[{"provider": "flux", "candidates": 6}])
    # Each plan waits (briefly) after counting for the other to count too: were the count
    # not serialised with the insert, both would count 4 and both would plan 6.
    counted = threading.Barrier(2, timeout=2)
    count = planning._tasks_planned_since

    def count_in_step(*args: Any, **kwargs: Any) -> int:
        planned = count(*args, **kwargs)
        # A broken barrier: the other plan is waiting for this transaction, as it should.
        with contextlib.suppress(threading.BrokenBarrierError):
            counted.wait()
        return planned

    monkeypatch.setattr(planning, "_tasks_planned_since", count_in_step)
    outcomes: list[str] = []

    def plan() -> None:
        try:
            engine.generate(request=six, user=user)
            outcomes.append("planned")
        except engine.SpendCapReached as exc:
            outcomes.append(f"refused at {exc.planned}")
        finally:
            connection.close()

    threads = [threading.Thread(target=plan) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["planned", "refused at 10"], "4 + 6 fit under 10; 4 + 6 + 6 not"
    assert planned_for(user) == 10


# --- references per batch are capped -------------------------------------------


def test_it_refuses_more_reference_photos_than_the_limit_by_default(subject, make_reference):
    for _ in range(8):
        make_reference(subject)  # 9 photos with the fixture's own

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject))

    assert str(refused.value) == (
        "This batch would send 9 reference photos (every photo of its subjects); the limit is 8."
    ), "the default cap is 8"
    assert refused.value.field == "references"
    assert nothing_created()


def test_it_refuses_more_reference_photos_than_the_setting_when_listed(
    subject, make_reference, settings
):
    settings.AVATARS_MAX_REFERENCES = 2
    photos = [subject.assets.get().pk] + [make_reference(subject).pk for _ in range(2)]

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, references=photos))

    assert str(refused.value) == "This batch would send 3 reference photos; the limit is 2.", (
        "cap 2"
    )
    assert nothing_created()


def test_it_accepts_exactly_the_limit_of_reference_photos(subject, make_reference, settings):
    settings.AVATARS_MAX_REFERENCES = 3
    make_reference(subject)
    make_reference(subject)

    batch = engine.generate(request=batch_request(subject))

    assert len(batch.tasks.get().references) == 3, "3 photos are the cap of 3, not past it"


def test_it_refuses_reference_photos_larger_in_total_than_the_limit(
    subject, make_reference, settings
):
    second = make_reference(subject)
    total = subject.assets.get(pk__lt=second.pk).size + second.size
    settings.AVATARS_MAX_REFERENCE_BYTES = total - 1

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject))

    assert str(refused.value) == (
        f"The reference photos come to {total:,} bytes; the limit is {total - 1:,} bytes."
    ), f"{total} bytes against a cap of {total - 1}"
    assert refused.value.field == "references"
    assert nothing_created()
    settings.AVATARS_MAX_REFERENCE_BYTES = total
    assert engine.generate(request=batch_request(subject)).tasks.count() == 1, "exactly the cap"


def test_it_states_large_reference_totals_in_mebibytes_too(subject, settings):
    photo = subject.assets.get()
    Asset.objects.filter(pk=photo.pk).update(size=50 * 1024 * 1024)

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject))

    assert str(refused.value) == (
        "The reference photos come to 52,428,800 bytes (50.0 MiB); "
        "the limit is 41,943,040 bytes (40.0 MiB)."
    ), "the default cap is 40 MiB"
