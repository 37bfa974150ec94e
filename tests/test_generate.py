"""generate() (docs/design.md §5): a batch is a list of intents, written at once, nothing sent."""

import uuid
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from studio import engine, originals
from studio.engine import InvalidRequest
from studio.models import Asset, Batch, Kind, Origin, Task, TaskState
from tests.conftest import batch_request, png_bytes

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
    generated = Asset.objects.create(
        sha256="e" * 64,
        file_name="generated.png",
        mime="image/png",
        width=64,
        height=48,
        size=100,
        origin=Origin.GENERATED,
    )
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
    generated = Asset.objects.create(
        sha256="d" * 64,
        file_name="generated.png",
        mime="image/png",
        width=64,
        height=48,
        size=100,
        origin=Origin.GENERATED,
    )

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, references=[generated.pk]))

    assert str(refused.value) == f"Unknown reference photo: {generated.pk}."
    assert nothing_created()


def generated_from(data: bytes) -> Asset:
    """A generated original whose file is on disk, as the worker's copy leaves it."""
    original = originals.save(data)
    return Asset.objects.create(
        sha256=original.sha256,
        file_name="openai-image-1.png",
        mime=original.info.mime,
        width=original.info.width,
        height=original.info.height,
        size=original.size,
        origin=Origin.GENERATED,
        ember_image_id="img_1",
    )


def test_it_makes_a_usable_reference_photo_of_an_uploaded_generated_image(subject, make_subject):
    data = png_bytes(42)
    generated = generated_from(data)
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
