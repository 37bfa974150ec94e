"""A batch's results keep a place for every task: the images on their way, and those that
will not come without a person, each saying so."""

import re

import pytest
from django.test import Client

from studio.models import TaskState
from studio.store import move
from tests.results_parts import deliver, mixed_batch

pytestmark = pytest.mark.django_db


def tiles_of(body: str) -> list[tuple[str, str]]:
    """The results' tiles in page order: ("image", its caption), or what an empty place says
    and its caption."""
    section = body.split('id="results"', 1)[1].split("</section>", 1)[0]
    tile = (
        r'<li class="tile result(?: coming| gone)?".*?(?:<span class="slot">([^<]*)</span>)?'
        r'<span class="caption">(?:<span[^>]*>)?([^<]*)'
    )
    found = re.findall(tile, section, re.S)
    return [(place or "image", caption.strip()) for place, caption in found]


def test_it_keeps_a_place_for_each_image_on_its_way_with_the_caption_it_will_have(
    signed_in: Client, subject
):
    """Found by a browser review: the page jumped as the images came in (a layout shift of
    0.27-0.30) and pushed the rows below them away. Each image that may still come without
    a person has its place, in the form's order, from the start."""
    batch = mixed_batch(subject)
    tasks = {(t.provider, t.frame): t for t in batch.tasks.all()}
    deliver(tasks["google", "image"], 1)
    move(tasks["flux", "headshot"], TaskState.FAILED, phase="Failed", error="Ember said no.")
    url = f"/batches/{batch.pk}/results/"

    body = signed_in.get(url).content.decode()

    assert tiles_of(body) == [
        ("On its way", "Ada · Imagen · headshot #1"),
        ("image", "Ada · Imagen · image #1"),
        ("Not made", "Ada · FLUX · headshot #1"),
        ("On its way", "Ada · FLUX · image #1"),
    ]
    assert body.count('aria-hidden="true" data-task=') == 3  # nothing to hear in an empty place
    assert "No images yet" not in body  # one is in: it is heard
    nothing = mixed_batch(subject)  # a second batch, none in yet: said to a screen reader
    said = signed_in.get(f"/batches/{nothing.pk}/results/").content.decode()
    assert '<p class="sr-only">No images yet: they appear here as they arrive.</p>' in said
    assert 'data-delivered="1"' in body
    for seed, key in enumerate((("google", "headshot"), ("flux", "image")), start=2):
        deliver(tasks[key], seed)
    assert tiles_of(signed_in.get(url).content.decode()) == [
        ("image", "Ada · Imagen · headshot #1"),
        ("image", "Ada · Imagen · image #1"),
        ("Not made", "Ada · FLUX · headshot #1"),
        ("image", "Ada · FLUX · image #1"),
    ]


@pytest.mark.parametrize(
    ("rest", "said"),
    [
        (TaskState.FAILED, "Not made"),
        (TaskState.CANCELLED, "Cancelled"),
        (TaskState.COPY_FAILED, "Needs an operator"),
        (TaskState.UNCERTAIN, "Needs an operator"),
    ],
)
def test_an_image_that_will_not_come_keeps_its_place_saying_why(
    signed_in: Client, subject, settings, rest, said
):
    """Found by a browser review: when an image failed, its place went and every image after
    it moved back one. Each keeps its place, saying why it is empty; the batch that
    delivered none says so where the favourites' hint would be, above the same places."""
    settings.AVATARS_ADOPT_PER_MINUTE = 0  # an unsure image: only a person will look it up
    batch = mixed_batch(subject)
    tasks = {(t.provider, t.frame): t for t in batch.tasks.all()}
    move(tasks["google", "image"], rest, phase="At rest", error="Ember said no.")
    url = f"/batches/{batch.pk}/results/"

    assert [place for place, _ in tiles_of(signed_in.get(url).content.decode())] == [
        "On its way",
        said,
        "On its way",
        "On its way",
    ]
    for task in tasks.values():
        if task.state != rest:
            move(task, TaskState.FAILED, phase="Failed", error="Ember said no.")
    body = signed_in.get(url).content.decode()
    places = [place for place, _ in tiles_of(body)]
    assert places == ["Not made", said, "Not made", "Not made"], places
    hint = re.search(r'<p class="hint" data-testid="no-images">([^<]*)</p>', body)
    assert hint is not None, body
    awaiting = rest in (TaskState.COPY_FAILED, TaskState.UNCERTAIN)
    assert hint.group(1).startswith("No images yet" if awaiting else "This batch delivered no")
    assert "they appear here as they arrive" not in body  # nothing arrives by itself now
