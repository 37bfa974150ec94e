"""A batch's failed images asked for again in a new batch, from a link on its page.

Found by a phone review: a failed image said "a new batch asks for it again, paid again",
and nothing led there; the person typed the whole form again.
"""

import re

import pytest
from django.test import Client

from studio.models import Batch, Task, TaskState
from studio.store import move
from tests.factories import a_batch
from tests.studio_pages import part, text

pytestmark = pytest.mark.django_db


def failed(batch: Batch, provider: str, frame: str, how_many: int) -> None:
    tasks = batch.tasks.filter(provider=provider, frame=frame).order_by("ordinal")
    for task in tasks[:how_many]:
        move(task, TaskState.FAILED, phase="Ember says the job failed", error="Refused.")


def field(page: str, name: str) -> str:
    found = re.search(rf'<input[^>]*name="{name}"[^>]*>', page)
    assert found, f"no field {name}"
    return found.group(0)


def test_the_batch_page_leads_to_a_form_asking_again_for_the_failed_images_only(
    signed_in: Client, subject
):
    batch = a_batch(subject, candidates=4, frames=("image", "headshot"), providers=("flux",))
    failed(batch, "flux", "image", 2)
    failed(batch, "flux", "headshot", 1)

    summary = signed_in.get(f"/batches/{batch.pk}/")
    said = part(summary, r'<a [^>]*data-testid="ask-again"[^>]*>[^<]*')
    assert said == "Ask again for the 3 failed images in a new batch…", said
    href = re.search(r'href="([^"]+)" data-testid="ask-again"', summary.content.decode())
    assert href, "no link"
    # Each failed row leads there too: the rows are what changes live.
    assert summary.content.decode().count('data-testid="ask-again-row"') == 3

    form = signed_in.get(href.group(1).replace("&amp;", "&"))
    page = form.content.decode()

    assert form.status_code == 200
    assert "Filled in to ask again for the 3 images of" in text(form)
    assert batch.request["prompt"] in page
    assert 'value="2"' in field(page, "candidates_flux"), "as many as failed in one frame"
    assert 'value="0"' in field(page, "candidates_openai")
    assert "checked" in field(page, "frames") and "headshot" in page
    # 2 candidates x 2 frames: at least the 3 that failed, the spend said on the button.
    assert "Start 4 paid jobs" in page
    assert Task.objects.count() == 8 and Batch.objects.count() == 1, "nothing planned"


def test_a_batch_with_nothing_failed_offers_no_link_and_fills_nothing(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)

    assert 'data-testid="ask-again"' not in signed_in.get(f"/batches/{batch.pk}/").content.decode()
    page = signed_in.get(f"/batches/new/?again={batch.pk}").content.decode()
    assert 'data-testid="again"' not in page
    assert "Start 0 paid jobs" in page


@pytest.mark.parametrize("wanted", ["nope", "0" * 40, "8d3c3a5e-0000-4000-8000-000000000000"])
def test_what_names_no_batch_is_the_empty_form(signed_in: Client, wanted):
    response = signed_in.get(f"/batches/new/?again={wanted}")

    assert response.status_code == 200
    assert 'data-testid="again"' not in response.content.decode()
