"""Downloads are saved under names that say what they are, differ, and are safe to save."""

import re

import pytest
from django.test import Client

from studio import curation, engine
from studio.models import Asset, Subject, Task
from tests.factories import a_batch, png_bytes, stored_asset

pytestmark = pytest.mark.django_db

SAFE = re.compile(r"^[A-Za-z0-9._-]{1,120}$")


def saved_as(client: Client, asset: Asset) -> str:
    """The file name a browser saves the download under, checked to be a plain attachment."""
    response = client.get(f"/assets/{asset.pk}/download/")
    assert response.status_code == 200
    found = re.fullmatch(r'attachment; filename="([^"]*)"', response["Content-Disposition"])
    assert found, response["Content-Disposition"]
    assert SAFE.match(found[1]), found[1]
    return found[1]


def result_of(task: Task, seed: int) -> Asset:
    """The worker's copy of `task`'s result, named as the worker names it."""
    asset = stored_asset(
        seed,
        task=task,
        provider=task.provider,
        file_name=f"{task.provider}-{task.frame}-{task.ordinal}.png",
    )
    asset.subjects.set(Subject.objects.filter(pk__in=task.subjects))
    return asset


def photo_named(subject: Subject, name: str, seed: int = 20) -> Asset:
    photo = engine.add_reference(subject=subject, data=png_bytes(seed), file_name="x.png")
    return curation.rename_photo(photo=photo, file_name=name)


def test_it_names_a_result_by_who_is_in_it_its_provider_frame_candidate_and_hash(
    signed_in: Client, subject, make_subject
):
    """Found by a review: every batch's first GPT Image result was `openai-image-1.png`; a
    later one: the provider by its internal key, which the studio never shows."""
    bo = make_subject("Bo")
    engine.add_reference(subject=bo, data=png_bytes(21), file_name="bo.png")
    first = result_of(a_batch(subject, subjects=[subject.pk, bo.pk]).tasks.get(), 30)
    second = result_of(a_batch(subject, subjects=[subject.pk, bo.pk]).tasks.get(), 31)

    names = [saved_as(signed_in, first), saved_as(signed_in, second)]

    assert names == [
        f"Ada-Bo-GPT-Image-image-1-{first.sha256[:8]}.png",
        f"Ada-Bo-GPT-Image-image-1-{second.sha256[:8]}.png",
    ]


def test_it_shortens_the_names_of_many_people_and_keeps_the_hash(signed_in: Client, subject):
    people = [subject]
    for n in range(6):
        person = Subject.objects.create(
            name=f"Someone with a very long name number {n}", slug=f"s{n}"
        )
        engine.add_reference(subject=person, data=png_bytes(40 + n), file_name="p.png")
        people.append(person)
    task = a_batch(subject, subjects=[p.pk for p in people]).tasks.get()
    asset = result_of(task, 32)

    name = saved_as(signed_in, asset)

    assert len(name) <= 120
    assert name.startswith("Ada-Someone-with-a-very-long-name-number-0")
    assert name.endswith(f"-GPT-Image-image-1-{asset.sha256[:8]}.png")


@pytest.mark.parametrize(
    ("label", "saved"),
    [
        ("Granny in the garden", "Granny-in-the-garden.png"),  # found by a review: no extension
        ("ada.png", "ada.png"),
        ("ADA.PNG", "ADA.png"),
        ("ada.jpg", "ada.png"),  # the name of another type says the type it is
        ("Ömer's photo", "Omer-s-photo.png"),
        ("../../etc/passwd", "etc-passwd.png"),
        ('a "quoted"\r\nname', "a-quoted-name.png"),
        ("...", "photo.png"),
        ("x" * 300, "x" * 116 + ".png"),
    ],
)
def test_it_names_a_reference_photo_by_its_label_with_its_extension(
    signed_in: Client, subject, label, saved
):
    assert saved_as(signed_in, photo_named(subject, label)) == saved


@pytest.mark.parametrize(
    ("label", "saved"), [("Sunday.jpeg", "Sunday.jpeg"), ("Sunday", "Sunday.jpg")]
)
def test_it_gives_a_jpeg_photo_a_jpeg_extension_keeping_its_own(
    signed_in: Client, subject, label, saved
):
    photo = engine.add_reference(subject=subject, data=png_bytes(22, fmt="JPEG"), file_name="x")
    curation.rename_photo(photo=photo, file_name=label)

    assert saved_as(signed_in, photo) == saved
