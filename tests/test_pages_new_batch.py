"""The new batch form: planning from it, its one-time token, why a batch cannot be planned."""

import re
from typing import Any

import pytest
from django.test import Client

from studio.models import Batch, Task, TaskState
from tests.factories import a_batch
from tests.studio_pages import batch_form, fieldset, messages_of, part, text

pytestmark = pytest.mark.django_db


# --- new batch --------------------------------------------------------------------------


def form_token(response: Any) -> str:
    found = re.search(r'name="token" value="([^"]+)"', response.content.decode())
    assert found, "the form carries no one-time token"
    return found.group(1)


def test_it_plans_a_batch_from_the_form_and_answers_with_its_page(
    signed_in: Client, subject, person
):
    response = signed_in.post("/batches/new/", batch_form(subject))

    batch = Batch.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/batches/{batch.pk}/"
    assert batch.created_by == person
    tasks = list(batch.tasks.values_list("provider", "frame", "ordinal", "state"))
    assert len(tasks) == (2 + 1) * 2
    assert {t[3] for t in tasks} == {TaskState.QUEUED}
    assert sorted({(p, f) for p, f, _, _ in tasks}) == [
        ("flux", "headshot"),
        ("flux", "image"),
        ("openai", "headshot"),
        ("openai", "image"),
    ]
    reference = subject.assets.get()
    assert batch.tasks.first().references[0]["sha256"] == reference.sha256

    page = text(signed_in.get(response["Location"]))
    assert "Summer" in page
    assert "6 in progress" in page
    assert "Paid Ember requests: 0" in page


def test_it_freezes_only_the_ticked_reference_photos(signed_in: Client, subject, make_reference):
    second = make_reference(subject)

    signed_in.post("/batches/new/", batch_form(subject, references=[second.pk]))

    task = Task.objects.first()
    assert [r["asset"] for r in task.references] == [second.pk]


def test_it_offers_every_provider_with_a_candidate_count(signed_in: Client, subject):
    page = signed_in.get("/batches/new/")

    body = page.content.decode()
    for key, entry in [("openai", "GPT Image"), ("flux", "FLUX"), ("google", "Imagen")]:
        assert f'name="candidates_{key}"' in body
        assert entry in text(page)
    assert 'name="prompt"' in body and "Ada" in text(page)


def test_it_gives_each_new_batch_form_its_own_one_time_token(signed_in: Client, subject):
    first, second = signed_in.get("/batches/new/"), signed_in.get("/batches/new/")

    assert 'type="hidden" name="token"' in first.content.decode()
    assert form_token(first) != form_token(second)


def test_it_plans_one_batch_when_the_same_form_is_posted_twice(signed_in: Client, subject):
    form = batch_form(subject, token=form_token(signed_in.get("/batches/new/")))
    first = signed_in.post("/batches/new/", form)

    again = signed_in.post("/batches/new/", form)  # a double click, or Back and submit

    batch = Batch.objects.get()
    assert (first.status_code, again.status_code) == (302, 302)
    assert again["Location"] == first["Location"] == f"/batches/{batch.pk}/"
    assert batch.tasks.count() == (2 + 1) * 2


def test_it_sends_a_form_resubmitted_with_changes_to_the_batch_it_planned(
    signed_in: Client, subject
):
    form = batch_form(subject)
    first = signed_in.post("/batches/new/", form)

    again = signed_in.post("/batches/new/", {**form, "prompt": "an oil painting"}, follow=True)

    batch = Batch.objects.get()
    assert again.redirect_chain == [(first["Location"], 302)]
    assert batch.request["prompt"] == "a friendly portrait, watercolour"
    assert messages_of(again) == [
        "This form already started this batch; nothing new was started or paid for. "
        "Open a new form to plan another batch."
    ]


def test_it_plans_again_from_a_form_with_a_new_token(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))

    # The same intent again within minutes asks first (test_batch_pages); "again" is the yes.
    signed_in.post("/batches/new/", batch_form(subject, again="on"))

    assert Batch.objects.count() == 2


def test_it_refuses_a_batch_form_without_its_token_and_plans_nothing(signed_in: Client, subject):
    form = batch_form(subject)
    del form["token"]

    response = signed_in.post("/batches/new/", form)

    assert response.status_code == 400
    assert "This form has expired; reload the page and submit it again." in text(response)
    assert not Batch.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"prompt": "   "}, "This field is required."),
        ({"candidates_openai": 0, "candidates_flux": 0}, "Choose at least one provider."),
        ({"subjects": []}, "Choose at least one subject."),
        ({"frames": []}, "Choose at least one frame."),
        ({"candidates_openai": 9}, "GPT Image: At most 8 candidates a provider."),
        ({"candidates_openai": -1}, "GPT Image: Enter a whole number, like 2 (0 leaves it out)."),
    ],
)
def test_it_shows_why_a_batch_cannot_be_planned_and_creates_nothing(
    signed_in: Client, subject, overrides: dict[str, Any], error: str
):
    response = signed_in.post("/batches/new/", batch_form(subject, **overrides))

    assert response.status_code == 400
    assert error in text(response)
    assert not Batch.objects.exists()
    assert not Task.objects.exists()


def alert(response: Any) -> str:
    return part(response, r'<div class="errors" role="alert">.*?</div>')


def test_it_shows_the_batch_size_cap_beside_the_candidates(signed_in: Client, subject, settings):
    settings.AVATARS_MAX_TASKS_PER_BATCH = 5

    response = signed_in.post("/batches/new/", batch_form(subject))  # (2 + 1) x 2 frames

    assert response.status_code == 400
    assert "This batch would make 6 tasks; the limit is 5." in fieldset(response, "Providers"), (
        "6 tasks against a cap of 5, beside the candidates"
    )
    assert "This batch would make" not in fieldset(response, "Reference photos")
    assert not Batch.objects.exists()


def test_it_shows_the_reference_caps_beside_the_reference_photos(
    signed_in: Client, subject, make_reference, settings
):
    settings.AVATARS_MAX_REFERENCES = 1
    make_reference(subject)

    response = signed_in.post("/batches/new/", batch_form(subject))

    assert response.status_code == 400
    assert (
        "This batch would send 2 reference photos (every photo of its subjects); the limit is 1."
        in fieldset(response, "Reference photos")
    ), "2 photos against a cap of 1, beside the photos"
    assert not Batch.objects.exists()


def test_it_shows_the_daily_cap_for_the_whole_form(signed_in: Client, subject, person, settings):
    settings.AVATARS_DAILY_TASK_CAP = 8
    a_batch(subject, candidates=4, user=person)

    response = signed_in.post("/batches/new/", batch_form(subject, prompt="a new prompt"))  # 6 more

    assert response.status_code == 400
    assert alert(response) == (
        "You have planned 4 paid tasks in the last 24 hours; "
        "this batch would make 6 more and the daily limit is 8. "
        "It fits in about 24 hours, when earlier tasks leave the window."
    ), "4 + 6 > 8, said once for the whole form"
    assert Batch.objects.count() == 1


def test_every_field_the_form_describes_points_at_a_description_on_the_page(signed_in, subject):
    """Found by a browser review: the candidate counts' aria-describedby named
    `id_candidates_*_helptext`, which no element had: a screen reader read nothing."""
    page = signed_in.get("/batches/new/").content.decode()

    described = re.findall(r'aria-describedby="([^"]+)"', page)

    assert described, "no field is described"
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    missing = [name for names in described for name in names.split() if name not in ids]
    assert not missing, f"described by no element: {missing}"


def test_the_form_says_how_many_paid_jobs_the_daily_limit_leaves(signed_in, subject, settings):
    """Found by a browser review: the daily limit and what is left of it were never shown
    before it refused a batch."""
    settings.AVATARS_DAILY_TASK_CAP = 10
    signed_in.post("/batches/new/", batch_form(subject))  # a batch of 6 paid jobs

    page = text(signed_in.get("/batches/new/"))

    planned = Task.objects.count()
    said = f"You may start {10 - planned} more paid jobs in the next 24 hours (the limit is 10"
    assert planned and said in page, page


def test_each_problem_said_at_the_top_leads_to_its_field(signed_in, subject):
    """Found by a browser review: the summary of errors at the top named each problem, and
    on a phone its field was screens below, with no way there but scrolling."""
    form = batch_form(subject, prompt="", subjects=[], frames=[], candidates_openai=0)
    form.update(candidates_flux=0, candidates_google=0)

    page = signed_in.post("/batches/new/", form).content.decode()

    found = re.search(r'<div class="errors"[^>]*data-testid="problems">.*?</div>', page, re.S)
    summary = found[0] if found else ""
    targets = re.findall(r'<a href="#([^"]+)">', summary)
    assert len(targets) >= 4, summary  # the prompt, the subjects, the providers, the frames
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    assert [t for t in targets if t not in ids] == [], summary
