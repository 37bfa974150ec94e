"""generate() refuses a bad request with a clear message and plans nothing."""

import json

import pytest
from django.db import IntegrityError, transaction

from studio import engine
from studio.engine import InvalidRequest
from studio.models import Asset, Origin
from tests.factories import batch_request, generated_asset, png_bytes, stored_asset
from tests.planned import frozen, nothing_created

pytestmark = pytest.mark.django_db


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Found by a review: a field no batch takes was planned without, in silence; a
        # misspelt one would be paid for as planned.
        pytest.param(
            {"extra": 1},
            'Unknown field: "extra". A batch takes title, prompt, subjects, references, '
            "providers, frames.",
            id="unknown-field",
        ),
        pytest.param(
            {"providers": [{"provider": "openai", "candidate": 4}]},
            'Unknown field: "candidate". A provider takes provider, candidates, model.',
            id="misspelt-candidates",
        ),
        pytest.param({"prompt": ""}, "The prompt must not be empty.", id="empty-prompt"),
        pytest.param({"prompt": "   \n "}, "The prompt must not be empty.", id="blank-prompt"),
        pytest.param({"prompt": None}, "The prompt must not be empty.", id="no-prompt"),
        pytest.param(
            {"prompt": "x" * 4001},
            "The prompt is too long (at most 4000 characters).",
            id="long-prompt",
        ),
        pytest.param({"title": 12}, "The title must be text.", id="title-not-text"),
        # Found by a review: 0 and [] were read as "no title" and quietly took the prompt's.
        pytest.param({"title": 0}, "The title must be text.", id="title-zero"),
        pytest.param({"title": []}, "The title must be text.", id="title-empty-list"),
        # Once cut to 200 characters without a word, against the schema's maxLength.
        pytest.param(
            {"title": "t" * 201},
            "The title is too long (at most 200 characters).",
            id="long-title",
        ),
        pytest.param({"subjects": []}, "Choose at least one subject.", id="no-subjects"),
        pytest.param({"subjects": [987654]}, "Unknown subject: 987654.", id="unknown-subject"),
        pytest.param(
            {"subjects": ["ada"]},
            'Subjects must be a list of ids; "ada" is not one.',
            id="subject-not-an-id",
        ),
        pytest.param(
            {"references": [987654]},
            "Unknown reference photo: 987654.",
            id="unknown-reference",
        ),
        # Found by a review: a batch sending no photo was planned, and Ember paid for strangers.
        pytest.param(
            {"references": []}, "Choose at least one reference photo.", id="no-references"
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
            'Unknown provider: "midjourney".',
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
            {"providers": [{"provider": "openai", "candidates": 2.5}]},
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
            'Provider "openai" is listed twice with the model "gpt-image-1": give its '
            "candidates in one row.",
            id="provider-twice",
        ),
        pytest.param(
            {
                "providers": [
                    {"provider": "openai", "model": "gpt-image-1"},
                    {"provider": "openai"},  # its default model: the same row again
                ]
            },
            'Provider "openai" is listed twice with the model "gpt-image-1": give its '
            "candidates in one row.",
            id="provider-twice-default-model",
        ),
        pytest.param(
            {"frames": ["portrait"]},
            'Unknown frame: "portrait". Frames are image, headshot, full-body, clip.',
            id="unknown-frame",
        ),
        pytest.param({"frames": []}, "Choose at least one frame.", id="no-frames"),
        # Found by a review: an object of names and counts was told to choose a provider.
        pytest.param(
            {"providers": {"openai": 1}},
            "Providers must be a list of providers, each an object with a provider name.",
            id="providers-an-object",
        ),
        pytest.param(
            {"providers": "openai"},
            "Providers must be a list of providers, each an object with a provider name.",
            id="providers-text",
        ),
        # Found by a review: a 2 MB model name came back whole in the refusal.
        pytest.param(
            {"providers": [{"provider": "openai", "model": "m" * 2_000_000}]},
            f'Unknown model for provider "openai": "{"m" * 98}…. Its models are gpt-image-1.',
            id="huge-model",
        ),
        pytest.param(
            {"providers": [{"provider": "p" * 2_000_000}]},
            f'Unknown provider: "{"p" * 98}….',
            id="huge-provider",
        ),
        pytest.param(
            {"frames": ["f" * 2_000_000]},
            f'Unknown frame: "{"f" * 98}…. Frames are image, headshot, full-body, clip.',
            id="huge-frame",
        ),
        pytest.param(
            {"subjects": ["s" * 2_000_000]},
            f'Subjects must be a list of ids; "{"s" * 98}… is not one.',
            id="huge-subject-id",
        ),
        pytest.param(
            {"frames": "image"},
            "The frames must be a list of these: image, headshot, full-body, clip.",
            id="frames-not-a-list",
        ),
    ],
)
def test_it_refuses_a_bad_request_with_a_clear_message_and_creates_nothing(
    subject, overrides, message
):
    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(subject, **overrides))

    assert str(refused.value) == message
    assert nothing_created()


def test_it_refuses_a_batch_of_subjects_with_no_photo_yet(subject, make_subject):
    grace = make_subject("Grace")  # no photo of her yet

    with pytest.raises(InvalidRequest) as refused:
        engine.generate(request=batch_request(grace))

    assert str(refused.value) == (
        "The subjects have no reference photos yet: upload a photo of them before planning a batch."
    )
    assert refused.value.field == "references", "the form shows it beside the photos"
    assert nothing_created()
    both = engine.generate(request=batch_request(grace, subjects=[grace.pk, subject.pk]))
    assert [r["asset"] for r in both.tasks.get().references] == [subject.assets.get().pk], (
        "one subject's photos are enough"
    )


@pytest.mark.parametrize("title", [None, "", "   "])
def test_a_batch_without_a_title_is_named_by_its_prompt(subject, title):
    batch = engine.generate(request=batch_request(subject, title=title, prompt="  Bo by the sea "))

    assert batch.title == "Bo by the sea"


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

    assert str(refused.value) == (
        f"Asset {generated.pk} is a result, not a reference photo: a batch sends only "
        "uploaded photos."
    )
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

    assert str(refused.value) == f"Subjects must be a list of ids; {json.dumps(bad)} is not one."
    assert nothing_created()


def test_frames_of_null_are_the_default_as_any_optional_field_of_null_is(subject):
    """Found by a review: `"frames": null` was refused while a null title, references or
    model each meant the default."""
    request = batch_request(subject) | {"frames": None, "title": None, "references": None}

    batch = engine.generate(request=request)

    assert {task.frame for task in batch.tasks.all()} == {"image"}


URL = "https://example.org/" + "a/very/long/path/" * 6


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        (
            "A warm watercolour portrait of grandma Edith sitting in her rose garden with "
            "the afternoon sun behind her and a cup of tea",
            "A warm watercolour portrait of grandma Edith sitting in her rose garden with\u2026",
        ),
        # No word ends in it: cut where the limit falls, and said to be cut.
        (URL, URL[:79] + "\u2026"),
        ("Bo " * 26 + "Bo", "Bo " * 26 + "Bo"),  # 80 characters: whole, no "…"
    ],
)
def test_a_title_cut_from_a_long_prompt_ends_after_a_word_and_says_it_was_cut(
    subject, prompt, title
):
    """Found by a review: "…rose garden with the" read as a whole title, and a web
    address was cut mid-word, with nothing saying either was cut."""
    batch = engine.generate(request=batch_request(subject, title=None, prompt=prompt))

    assert batch.title == title
    assert len(batch.title) <= 80
