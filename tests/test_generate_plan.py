"""generate() (docs/design.md §5): a batch is a list of intents, written at once, nothing sent."""

import uuid

import pytest

from studio import engine
from studio.models import Asset, Kind, Origin, Task, TaskState
from tests.factories import batch_request, generated_asset
from tests.planned import frozen, nothing_created

pytestmark = pytest.mark.django_db


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
