"""A batch's failed images asked for again in a new batch, from a link on its page.

Found by a phone review: a failed image said "a new batch asks for it again, paid again",
and nothing led there; the person typed the whole form again.
"""

import re
import secrets
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

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


def asking_again_form(batch: Batch, **overrides: object) -> dict[str, object]:
    """The form the batch's link fills in, as posted: a fresh one-time token each time, as
    the page sends after Back (it is never cached) or when the link is followed again."""
    flux = batch.tasks.filter(state=TaskState.FAILED).count()
    return batch_form_for(batch, flux, again_of=str(batch.pk), **overrides)


def batch_form_for(batch: Batch, flux: int, **overrides: object) -> dict[str, object]:
    return {
        "title": f"{batch.title} (again)",
        "prompt": batch.request["prompt"],
        "subjects": batch.request["subjects"],
        "frames": ["image"],
        "candidates_openai": 0,
        "candidates_flux": flux,
        "candidates_google": 0,
        "token": secrets.token_urlsafe(24),
        **overrides,
    }


def test_asking_again_for_the_same_failed_images_twice_asks_first_however_long_since(
    signed_in: Client, subject, person
):
    """Found by a review in Chromium: Back to the filled-in form, or the batch's link again,
    and "Start 2 paid jobs" planned another batch each time: 8 paid jobs for 2 failed
    images, with no question. The first asking is not taken for a repeat of its batch."""
    batch = a_batch(subject, candidates=2, providers=("flux",), user=person)
    failed(batch, "flux", "image", 2)  # every image: this form is that batch's very twin

    first = signed_in.post("/batches/new/", asking_again_form(batch))
    assert first.status_code == 302 and Batch.objects.count() == 2, "the first asking planned"
    Batch.objects.filter(pk=batch.pk).update(created_at=timezone.now() - timedelta(hours=4))
    Batch.objects.exclude(pk=batch.pk).update(created_at=timezone.now() - timedelta(hours=3))

    again = signed_in.post("/batches/new/", asking_again_form(batch))

    assert again.status_code == 200 and Batch.objects.count() == 2, "paid for them again"
    assert "You started the same batch 3 hours ago" in text(again), text(again)
    assert "Start it again on purpose" in text(again)
    on_purpose = signed_in.post("/batches/new/", asking_again_form(batch, again="on"))
    assert on_purpose.status_code == 302 and Batch.objects.count() == 3


def test_another_person_asking_again_for_the_same_failed_images_is_asked_first(
    client: Client, signed_in: Client, subject, person
):
    batch = a_batch(subject, candidates=2, providers=("flux",), user=person)
    failed(batch, "flux", "image", 1)
    assert signed_in.post("/batches/new/", asking_again_form(batch)).status_code == 302
    other = Client()
    other.force_login(User.objects.create_user("ada", password="not-a-real-password"))

    answer = other.post("/batches/new/", asking_again_form(batch))

    assert answer.status_code == 200 and Batch.objects.count() == 2
    assert "You started the same batch less than a minute ago" in text(answer), text(answer)


def test_the_form_asking_again_is_titled_after_its_batch(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2, providers=("flux",), title="Garden")
    failed(batch, "flux", "image", 1)

    page = signed_in.get(f"/batches/new/?again={batch.pk}").content.decode()

    assert 'value="Garden (again)"' in field(page, "title")
    assert f'value="{batch.pk}"' in field(page, "again_of")


def test_asking_again_once_more_is_asked_first_after_fifty_other_batches(
    signed_in: Client, subject, person
):
    """Found by a re-review: the twin was looked for among the 50 newest batches only, and
    after 50 others the same failed images were paid for again without a question."""
    batch = a_batch(subject, candidates=2, providers=("flux",), user=person)
    failed(batch, "flux", "image", 2)
    assert signed_in.post("/batches/new/", asking_again_form(batch)).status_code == 302
    for n in range(60):
        a_batch(subject, candidates=1, providers=("flux",), user=person, prompt=f"other {n}")

    again = signed_in.post("/batches/new/", asking_again_form(batch))

    assert again.status_code == 200, "paid for them again"
    assert "You started the same batch" in text(again), text(again)
