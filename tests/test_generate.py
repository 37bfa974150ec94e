"""generate() (docs/design.md §5): a batch is a list of intents, written at once, nothing sent."""

import contextlib
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from studio import engine
from studio.engine import InvalidRequest, planning
from studio.models import Asset, Batch, BatchKey, Kind, Origin, Task, TaskState
from tests.factories import batch_request, generated_asset, png_bytes, stored_asset

pytestmark = pytest.mark.django_db


def nothing_created() -> bool:
    return Batch.objects.count() == 0 and Task.objects.count() == 0


def frozen(asset: Asset) -> dict[str, Any]:
    return {"asset": asset.pk, "sha256": asset.sha256, "name": asset.file_name, "mime": asset.mime}


@pytest.fixture
def many_providers(settings):
    """A catalogue of 26 providers, so that a batch can ask for more than 200 tasks."""
    settings.AVATARS_PROVIDERS = {
        f"p{i:02d}": {"label": f"Provider {i}", "model": f"model-{i}"} for i in range(26)
    }
    return sorted(settings.AVATARS_PROVIDERS)


# --- what a batch plans -------------------------------------------------------


def test_it_plans_providers_times_frames_times_candidates(subject, ember):
    request = batch_request(
        subject,
        providers=[
            {"provider": "openai", "candidates": 2},
            {"provider": "flux", "model": "flux-pro", "candidates": 1},
            {"provider": "google", "candidates": 1},
        ],
        frames=["image", "headshot"],
    )

    batch = engine.generate(request=request)

    planned = sorted(
        batch.tasks.values_list("provider", "provider_label", "model", "frame", "ordinal")
    )
    assert planned == [
        ("flux", "FLUX", "flux-pro", "headshot", 1),
        ("flux", "FLUX", "flux-pro", "image", 1),
        ("google", "Imagen", "imagen-4", "headshot", 1),
        ("google", "Imagen", "imagen-4", "image", 1),
        ("openai", "GPT Image", "gpt-image-1", "headshot", 1),
        ("openai", "GPT Image", "gpt-image-1", "headshot", 2),
        ("openai", "GPT Image", "gpt-image-1", "image", 1),
        ("openai", "GPT Image", "gpt-image-1", "image", 2),
    ]
    assert len(ember.calls) == 0  # nothing was sent to Ember


def test_it_writes_every_task_queued_with_the_prompt_and_subjects(subject, make_subject):
    grace = make_subject("Grace")

    batch = engine.generate(
        request=batch_request(
            subject,
            subjects=[subject.pk, grace.pk],
            prompt="  a friendly portrait, watercolour  ",
            providers=[{"provider": "openai", "candidates": 3}],
        )
    )

    tasks = list(batch.tasks.all())
    assert len(tasks) == 3
    for task in tasks:
        assert task.state == TaskState.QUEUED
        assert task.phase == "Waiting for the worker"
        assert task.next_attempt_at is not None  # due for the worker now
        assert task.prompt == "a friendly portrait, watercolour"
        assert task.subjects == [subject.pk, grace.pk]
        assert task.ember_job_id == ""
        assert task.version == 1
    assert sorted(t.ordinal for t in tasks) == [1, 2, 3]
    assert batch.title == "Spring avatars"


def test_it_numbers_candidates_from_one_for_each_provider_and_frame(subject):
    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "openai", "candidates": 4},
                {"provider": "google", "candidates": 2},
            ],
            frames=["image", "full-body"],
        )
    )

    by_slot: dict[tuple[str, str], list[int]] = {}
    for task in batch.tasks.all():
        by_slot.setdefault((task.provider, task.frame), []).append(task.ordinal)
    assert {slot: sorted(o) for slot, o in by_slot.items()} == {
        ("openai", "image"): [1, 2, 3, 4],
        ("openai", "full-body"): [1, 2, 3, 4],
        ("google", "image"): [1, 2],
        ("google", "full-body"): [1, 2],
    }


def test_it_gives_batches_and_tasks_uuid_ids(subject):
    batch = engine.generate(
        request=batch_request(subject, providers=[{"provider": "flux", "candidates": 2}])
    )

    assert isinstance(batch.pk, uuid.UUID)
    ids = [t.pk for t in batch.tasks.all()]
    assert all(isinstance(i, uuid.UUID) for i in ids)
    assert len(set(ids)) == 2


def test_it_accepts_ids_given_as_strings(subject):
    reference = subject.assets.get()

    batch = engine.generate(
        request=batch_request(subject, subjects=[str(subject.pk)], references=[str(reference.pk)])
    )

    task = batch.tasks.get()
    assert task.subjects == [subject.pk]
    assert task.references == [frozen(reference)]


def test_it_keeps_the_validated_request_on_the_batch(subject):
    reference = subject.assets.get()

    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[{"provider": "flux", "model": "flux-pro", "candidates": 2}],
            frames=["image", "clip"],
        )
    )

    batch.refresh_from_db()
    assert batch.request == {
        "title": "Spring avatars",
        "prompt": "a friendly portrait, watercolour",
        "subjects": [subject.pk],
        "references": [reference.pk],
        "providers": [{"provider": "flux", "model": "flux-pro", "candidates": 2}],
        "frames": ["image", "clip"],
    }


def test_it_accepts_the_largest_batch_from_the_default_catalogue(subject):
    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "openai", "candidates": 8},
                {"provider": "flux", "candidates": 8},
                {"provider": "google", "candidates": 8},
            ],
            frames=["image", "headshot", "full-body", "clip"],
        )
    )

    assert batch.tasks.count() == 96
    assert batch.tasks.filter(kind=Kind.CLIP).count() == 24


def test_it_accepts_exactly_two_hundred_tasks(subject, many_providers):
    providers = [{"provider": name, "candidates": 8} for name in many_providers[:25]]

    batch = engine.generate(request=batch_request(subject, providers=providers))

    assert batch.tasks.count() == 200


# --- references ---------------------------------------------------------------


def test_it_freezes_all_uploaded_references_of_the_subjects_by_default(
    subject, make_subject, make_reference
):
    grace = make_subject("Grace")
    grace_first = make_reference(grace)
    grace_second = make_reference(grace)
    stranger = make_reference(make_subject("Linus"))
    generated = generated_asset()
    generated.subjects.add(subject)
    ada_reference = subject.assets.get(origin=Origin.UPLOADED)

    batch = engine.generate(request=batch_request(subject, subjects=[subject.pk, grace.pk]))

    task = batch.tasks.get()
    assert task.references == [frozen(ada_reference), frozen(grace_first), frozen(grace_second)]
    assert frozen(stranger) not in task.references
    assert all(r["asset"] != generated.pk for r in task.references)


def test_it_honours_an_explicit_list_of_references(subject, make_reference):
    second = make_reference(subject)
    third = make_reference(subject)

    batch = engine.generate(request=batch_request(subject, references=[third.pk, second.pk]))

    for task in batch.tasks.all():
        assert task.references == [frozen(third), frozen(second)]


def test_it_freezes_the_references_hash_at_the_time_of_the_request(subject):
    reference = subject.assets.get()

    batch = engine.generate(request=batch_request(subject))
    Asset.objects.filter(pk=reference.pk).update(sha256="f" * 64)

    assert batch.tasks.get().references[0]["sha256"] == reference.sha256


# --- clips --------------------------------------------------------------------


def test_it_gives_each_clip_task_its_own_idempotency_key(subject):
    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "openai", "candidates": 3},
                {"provider": "google", "candidates": 2},
            ],
            frames=["image", "clip"],
        )
    )

    clips = list(batch.tasks.filter(frame="clip"))
    images = list(batch.tasks.filter(frame="image"))
    assert len(clips) == 5
    assert all(t.kind == Kind.CLIP for t in clips)
    assert all(t.idempotency_key for t in clips)
    assert len({t.idempotency_key for t in clips}) == 5
    assert all(t.kind == Kind.IMAGE and t.idempotency_key == "" for t in images)


def test_it_gives_clip_keys_that_differ_between_batches(subject):
    request = batch_request(subject, frames=["clip"])

    first = engine.generate(request=request).tasks.get()
    second = engine.generate(request=request).tasks.get()

    assert first.idempotency_key != second.idempotency_key


# --- one transaction ----------------------------------------------------------


def test_it_leaves_nothing_behind_when_writing_the_tasks_fails(subject, monkeypatch):
    def broken_bulk_create(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Task.objects, "bulk_create", broken_bulk_create)

    with pytest.raises(RuntimeError, match="disk full"):
        engine.generate(request=batch_request(subject))

    assert nothing_created()


def test_it_writes_a_large_batch_in_a_handful_of_queries(subject, django_assert_max_num_queries):
    request = batch_request(
        subject,
        providers=[{"provider": name, "candidates": 8} for name in ("openai", "flux", "google")],
        frames=["image", "headshot", "full-body", "clip"],
    )

    with django_assert_max_num_queries(10):
        batch = engine.generate(request=request)

    assert batch.tasks.count() == 96


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"prompt": ""}, "The prompt must not be empty.", id="empty-prompt"),
        pytest.param({"prompt": "   \n "}, "The prompt must not be empty.", id="blank-prompt"),
        pytest.param({"prompt": None}, "The prompt must not be empty.", id="no-prompt"),
        pytest.param(
            {"prompt": "x" * 4001},
            "The prompt is too long (at most 4000 characters).",
            id="long-prompt",
        ),
        pytest.param({"title": 12}, "The title must be text.", id="title-not-text"),
        pytest.param({"subjects": []}, "Choose at least one subject.", id="no-subjects"),
        pytest.param({"subjects": [987654]}, "Unknown subject: 987654.", id="unknown-subject"),
        pytest.param(
            {"subjects": ["ada"]},
            "Subjects must be a list of ids; 'ada' is not one.",
            id="subject-not-an-id",
        ),
        pytest.param(
            {"references": [987654]},
            "Unknown reference photo: 987654.",
            id="unknown-reference",
        ),
        pytest.param({"providers": []}, "Choose at least one provider.", id="no-providers"),
        pytest.param({"providers": None}, "Choose at least one provider.", id="providers-none"),
        pytest.param(
            {"providers": ["openai"]},
            "Each provider must be an object with a provider name.",
            id="provider-not-object",
        ),
        pytest.param(
            {"providers": [{"provider": "midjourney", "candidates": 1}]},
            "Unknown provider: 'midjourney'.",
            id="unknown-provider",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidates": 0}]},
            "Candidates must be between 1 and 8.",
            id="zero-candidates",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidates": 9}]},
            "Candidates must be between 1 and 8.",
            id="nine-candidates",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidates": "3"}]},
            "Candidates must be a whole number.",
            id="candidates-string",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidates": True}]},
            "Candidates must be a whole number.",
            id="candidates-bool",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidates": 2.0}]},
            "Candidates must be a whole number.",
            id="candidates-float",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "model": 5}]},
            "A provider's model must be text.",
            id="model-not-text",
        ),
        pytest.param(
            {"providers": [{"provider": "openai"}, {"provider": "openai"}]},
            "Provider 'openai' is listed twice.",
            id="provider-twice",
        ),
        pytest.param(
            {"frames": ["portrait"]},
            "Unknown frame: 'portrait'. Frames are image, headshot, full-body, clip.",
            id="unknown-frame",
        ),
        pytest.param({"frames": []}, "Choose at least one frame.", id="no-frames"),
    ],
)
def test_it_refuses_a_bad_request_with_a_clear_message_and_creates_nothing(
    subject, overrides, message
):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, **overrides))

    assert str(refused.value) == message
    assert nothing_created()


@pytest.mark.parametrize("request_body", [None, "make avatars", ["prompt"], 42])
def test_it_refuses_a_request_that_is_not_an_object(db, request_body):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=request_body)

    assert str(refused.value) == "The request must be a JSON object."
    assert nothing_created()


def test_it_refuses_a_generated_image_as_a_reference_photo(subject):
    generated = generated_asset()

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, references=[generated.pk]))

    assert str(refused.value) == f"Unknown reference photo: {generated.pk}."
    assert nothing_created()


def test_it_makes_a_usable_reference_photo_of_an_uploaded_generated_image(subject, make_subject):
    data = png_bytes(42)
    generated = stored_asset(data=data)
    grace = make_subject("Grace")

    photo = engine.add_reference(subject=grace, data=data, file_name="grace.png")

    assert photo.pk != generated.pk
    assert (photo.origin, photo.sha256) == (Origin.UPLOADED, generated.sha256)
    assert list(grace.assets.filter(origin=Origin.UPLOADED)) == [photo]
    assert list(generated.subjects.all()) == []  # the generated row is left as it was
    batch = engine.generate(request=batch_request(grace, references=[photo.pk]))
    assert batch.tasks.get().references == [frozen(photo)]


def test_it_keeps_one_reference_photo_for_the_same_upload_to_two_subjects(make_subject):
    data = png_bytes(43)
    ada, grace = make_subject("Ada"), make_subject("Grace")

    first = engine.add_reference(subject=ada, data=data, file_name="ada.png")
    second = engine.add_reference(subject=grace, data=data, file_name="grace.png")

    assert second.pk == first.pk
    assert set(first.subjects.all()) == {ada, grace}
    assert Asset.objects.filter(origin=Origin.UPLOADED).count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():
        Asset.objects.create(
            **{f: getattr(first, f) for f in ("sha256", "file_name", "mime", "width", "height")},
            size=first.size,
            origin=Origin.UPLOADED,
        )


def test_it_refuses_more_than_two_hundred_tasks(subject, many_providers):
    providers = [{"provider": name, "candidates": 8} for name in many_providers]

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, providers=providers))

    assert str(refused.value) == "This batch would make 208 tasks; the limit is 200."
    assert nothing_created()


@pytest.mark.parametrize(
    "provider",
    [["openai"], {"name": "openai"}],
    ids=["list", "object"],
)
def test_it_refuses_a_provider_name_that_is_not_text(subject, provider):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(
            request=batch_request(subject, providers=[{"provider": provider, "candidates": 1}])
        )

    assert str(refused.value).startswith("Unknown provider:")
    assert nothing_created()


def test_it_refuses_a_subject_id_too_large_for_any_row(subject):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, subjects=[2**70]))

    assert str(refused.value) == f"Unknown subject: {2**70}."
    assert nothing_created()


def test_it_refuses_a_reference_id_too_large_for_any_row(subject):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, references=[2**70]))

    assert str(refused.value) == f"Unknown reference photo: {2**70}."
    assert nothing_created()


@pytest.mark.parametrize("make_id", [lambda pk: pk + 0.5, lambda pk: True], ids=["float", "bool"])
def test_it_refuses_a_subject_id_that_only_truncates_to_one(subject, make_id):
    # 1.5 or True are not ids; silently reading them as a real subject would
    # plan paid work for a person nobody named.
    bad = make_id(subject.pk)

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, subjects=[bad]))

    assert str(refused.value) == f"Subjects must be a list of ids; {bad!r} is not one."
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
            "Unknown model for provider 'flux': 'flux-max'. Its models are flux-dev, flux-pro.",
            id="unknown-model",
        ),
        pytest.param(
            [{"provider": "openai", "model": f"model-{i}", "candidates": 8} for i in range(7)],
            "Unknown model for provider 'openai': 'model-0'. Its models are gpt-image-1.",
            id="made-up-models",
        ),
        pytest.param(
            [
                {"provider": "flux", "model": "flux-dev", "candidates": 5},
                {"provider": "flux", "model": "flux-pro", "candidates": 4},
            ],
            "Provider 'flux' has 9 candidates across its rows; the limit is 8 per provider.",
            id="candidates-split-by-model",
        ),
        pytest.param(
            [
                {"provider": "flux", "candidates": 8},
                {"provider": "openai", "candidates": 1},
                {"provider": "flux", "model": "flux-pro", "candidates": 1},
            ],
            "Provider 'flux' has 9 candidates across its rows; the limit is 8 per provider.",
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
        "this batch would make 3 more and the daily limit is 10."
    ), "8 planned + 3 > 10"
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


def test_it_counts_cancelled_tasks_toward_the_daily_cap(subject, family, settings):
    settings.AVATARS_DAILY_TASK_CAP = 10
    first = engine.generate(
        request=batch_request(subject, providers=[{"provider": "openai", "candidates": 8}]),
        user=family,
    )
    engine.cancel_batch(batch=first)

    with pytest.raises(engine.SpendCapReached) as refused:
        engine.generate(
            request=batch_request(subject, providers=[{"provider": "flux", "candidates": 3}]),
            user=family,
        )

    assert refused.value.planned == 8, "8 planned (then cancelled) tasks still count"


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
