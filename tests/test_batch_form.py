"""The new-batch form: the spend named before it is paid, one intent one payment, errors at once."""

import re
import secrets
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from studio import engine, originals
from studio.models import Asset, Batch, Origin, Task
from studio.web.forms import BatchForm
from tests.factories import png_bytes
from tests.studio_pages import batch_form, fieldset, messages_of, text

pytestmark = pytest.mark.django_db

TIMES = "\u00d7"  # as the page writes it


# --- 1. one intent, one payment ----------------------------------------------------------


def test_it_asks_before_starting_the_same_batch_again_within_ten_minutes(
    signed_in: Client, subject
):
    first = signed_in.post("/batches/new/", batch_form(subject))

    again = signed_in.post("/batches/new/", batch_form(subject))  # a new token, same intent

    batch = Batch.objects.get()
    assert first.status_code == 302 and again.status_code == 200
    assert "You started the same batch less than a minute ago" in text(again)
    assert f'href="/batches/{batch.pk}/"' in again.content.decode()
    assert "Start it again on purpose" in text(again)
    assert Task.objects.count() == 6


def test_a_twin_planned_by_another_tab_just_after_this_forms_look_is_still_asked_about(
    signed_in: Client, subject, monkeypatch
):
    """Found by a review over uvicorn: four tabs' forms of one batch, sent at the same
    moment, planned four paid batches; each looked for a twin before any had planned."""
    look = engine.recent_twin

    def look_then_the_other_tab_plans(request, user, *, key="", asking_again=None):
        seen = look(request, user, key=key, asking_again=asking_again)
        engine.generate(request=request, user=user, key=secrets.token_urlsafe(24))
        return seen

    monkeypatch.setattr(engine, "recent_twin", look_then_the_other_tab_plans)

    answer = signed_in.post("/batches/new/", batch_form(subject))

    assert answer.status_code == 200, answer.get("Location")
    assert "You started the same batch less than a minute ago" in text(answer)
    assert "Start it again on purpose" in text(answer)
    assert Batch.objects.count() == 1, "both tabs planned a paid batch"


def test_it_says_how_many_minutes_ago_the_same_batch_was_started(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))
    Batch.objects.update(created_at=timezone.now() - timedelta(minutes=7, seconds=10))

    again = signed_in.post("/batches/new/", batch_form(subject))

    assert "You started the same batch 7 minutes ago" in text(again)
    assert Batch.objects.count() == 1


def test_it_says_one_minute_only_once_a_minute_has_passed(signed_in: Client, subject):
    """Found by a review: 12 seconds after the first, the page said "1 minute ago"."""
    signed_in.post("/batches/new/", batch_form(subject))
    Batch.objects.update(created_at=timezone.now() - timedelta(seconds=61))

    again = signed_in.post("/batches/new/", batch_form(subject))

    assert "You started the same batch 1 minute ago" in text(again)


def hidden_in_the_notice(response: Any) -> dict[str, str]:
    """The hidden fields the same-batch notice adds to the form, as a browser sends them back."""
    notice = re.search(r'data-testid="twin">(.*?)</div>', response.content.decode(), re.S)
    assert notice, "the page does not say the same batch was started"
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', notice.group(1)))


def test_it_says_to_tick_the_box_when_the_button_is_pressed_again_without_it(
    signed_in: Client, subject
):
    signed_in.post("/batches/new/", batch_form(subject))
    asked = signed_in.post("/batches/new/", batch_form(subject))
    assert "To start it anyway" not in text(asked)

    again = signed_in.post("/batches/new/", {**batch_form(subject), **hidden_in_the_notice(asked)})

    assert again.status_code == 200
    assert "You started the same batch less than a minute ago" in text(again)
    assert (
        "To start it anyway, tick “Start it again on purpose”, then press “Start 6 paid jobs”."
        in text(again)
    )
    assert Batch.objects.count() == 1


def test_it_starts_the_same_batch_again_when_the_person_says_so(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))

    again = signed_in.post("/batches/new/", batch_form(subject, again="on"))

    assert again.status_code == 302
    assert Batch.objects.count() == 2


def test_it_plans_the_same_intent_without_asking_after_ten_minutes(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))
    Batch.objects.update(created_at=timezone.now() - timedelta(minutes=11))

    again = signed_in.post("/batches/new/", batch_form(subject))

    assert again.status_code == 302
    assert Batch.objects.count() == 2


@pytest.mark.parametrize(
    "change",
    [
        {"prompt": "another prompt altogether"},
        {"candidates_openai": 0, "candidates_flux": 0, "candidates_google": 2},  # no provider
        {"frames": ["full-body"]},  # no framing in common
    ],
    ids=["another prompt", "other providers only", "other framings only"],
)
def test_it_plans_a_batch_that_repeats_no_image_without_asking(signed_in: Client, subject, change):
    signed_in.post("/batches/new/", batch_form(subject))

    other = signed_in.post("/batches/new/", batch_form(subject, **change))

    assert other.status_code == 302
    assert Batch.objects.count() == 2


@pytest.mark.parametrize(
    "change",
    [{"candidates_google": 1}, {"frames": ["image"]}, {"candidates_openai": 3}],
    ids=["a provider added", "a framing taken out", "more candidates"],
)
def test_it_asks_before_a_changed_batch_pays_again_for_images_it_repeats(
    signed_in: Client, subject, change
):
    """Found by a review in Chromium: Back to the form (a new one-time token), a provider
    added, and "Start 2 paid jobs" paid again for the first batch's GPT Image #1."""
    signed_in.post("/batches/new/", batch_form(subject))

    changed = signed_in.post("/batches/new/", batch_form(subject, **change))

    assert changed.status_code == 200
    page = text(changed)
    assert "You started a batch of this prompt and these subjects less than a minute ago" in page
    assert "This one would pay again for images of the same providers and framings." in page
    assert "Start it again on purpose" in page
    assert Batch.objects.count() == 1
    again = signed_in.post("/batches/new/", batch_form(subject, again="on", **change))
    assert again.status_code == 302 and Batch.objects.count() == 2


def test_a_form_sent_by_enter_in_a_field_plans_nothing_and_asks_for_the_button(
    signed_in: Client, subject
):
    """Enter submits through the form's first button (`enter`), never the one naming the spend."""
    response = signed_in.post("/batches/new/", batch_form(subject, enter="1"))

    assert response.status_code == 200
    assert "Nothing was started: press “Start 6 paid jobs” to start them." in text(response)
    assert not Batch.objects.exists()


@pytest.mark.parametrize("named", ["0", "5", "7", ""])
def test_a_press_of_a_button_naming_another_number_plans_nothing_and_names_the_right_one(
    signed_in: Client, subject, named
):
    """Found by a review: without script the button still said what the page was served with."""
    response = signed_in.post("/batches/new/", batch_form(subject, start=named))

    assert response.status_code == 200
    assert "Nothing was started: press “Start 6 paid jobs” to start them." in text(response)
    assert 'name="start" value="6"' in response.content.decode()
    assert not Batch.objects.exists()


def test_a_press_of_the_button_naming_the_forms_number_plans_it(signed_in: Client, subject):
    response = signed_in.post("/batches/new/", batch_form(subject, start="6"))

    assert response.status_code == 302
    assert Batch.objects.get().tasks.count() == 6


def test_it_does_not_ask_about_another_persons_batch(signed_in: Client, subject):
    someone = User.objects.create_user("ada", password="another-password-entirely")
    form = BatchForm(batch_form(subject))
    assert form.is_valid()
    engine.generate(request=form.to_request(), user=someone)

    mine = signed_in.post("/batches/new/", batch_form(subject))

    assert mine.status_code == 302
    assert Batch.objects.count() == 2


# --- 2. cost before spend ------------------------------------------------------------------


def test_it_starts_every_provider_at_zero_and_names_the_spend_on_the_button(
    signed_in: Client, subject
):
    body = signed_in.get("/batches/new/").content.decode()

    for key in ("openai", "flux", "google"):
        assert re.search(rf'name="candidates_{key}" value="0"', body), key
    assert re.search(r"<button[^>]*>Start 0 paid jobs</button>", body)


@pytest.mark.parametrize(
    ("overrides", "button", "total"),
    [
        ({}, "Start 6 paid jobs", f"3 candidates {TIMES} 2 frames = 6 paid jobs"),
        (
            {"candidates_openai": 1, "candidates_flux": 0, "frames": ["image"]},
            "Start 1 paid job",
            f"1 candidate {TIMES} 1 frame = 1 paid job",
        ),
    ],
)
def test_it_counts_the_paid_jobs_again_when_the_form_comes_back_with_errors(
    signed_in: Client, subject, overrides: dict[str, Any], button: str, total: str
):
    response = signed_in.post("/batches/new/", batch_form(subject, prompt="", **overrides))

    assert response.status_code == 400
    assert re.search(rf"<button[^>]*>{button}</button>", response.content.decode())
    assert total in text(response)


def test_it_asks_a_second_time_before_starting_many_paid_jobs(signed_in: Client, subject, settings):
    settings.AVATARS_CONFIRM_JOBS_ABOVE = 5
    form = batch_form(subject)  # (2 + 1) x 2 frames = 6

    asked = signed_in.post("/batches/new/", form)
    sure = signed_in.post("/batches/new/", {**form, "confirm_jobs": "6"})

    assert asked.status_code == 200
    assert "This starts 6 paid jobs. Start them?" in text(asked)
    assert 'name="confirm_jobs" value="6"' in asked.content.decode()
    assert sure.status_code == 302
    assert Task.objects.count() == 6


def test_the_question_sent_again_after_the_yes_answers_with_the_batch_it_started(
    signed_in: Client, subject, settings
):
    """Found by a review: Back after the yes, and a reload, sent the question's post again;
    the page asked "Start them?" as if nothing had started (its Start then opened the batch)."""
    settings.AVATARS_CONFIRM_JOBS_ABOVE = 5
    form = batch_form(subject)  # 6 jobs
    signed_in.post("/batches/new/", form)
    started = signed_in.post("/batches/new/", {**form, "confirm_jobs": "6"})

    again = signed_in.post("/batches/new/", form, follow=True)  # the question's post

    assert again.redirect_chain == [(started["Location"], 302)]
    assert "Start them?" not in text(again)
    assert messages_of(again) == [
        "This form already started this batch; nothing new was started or paid for. "
        "Open a new form to plan another batch."
    ]
    assert Batch.objects.count() == 1 and Task.objects.count() == 6


def test_it_asks_again_when_the_jobs_changed_after_the_yes(signed_in: Client, subject, settings):
    settings.AVATARS_CONFIRM_JOBS_ABOVE = 5

    asked = signed_in.post(
        "/batches/new/", batch_form(subject, candidates_openai=3, confirm_jobs=6)
    )

    assert "This starts 8 paid jobs. Start them?" in text(asked)
    assert not Batch.objects.exists()


def test_it_does_not_ask_at_or_below_the_threshold(signed_in: Client, subject, settings):
    settings.AVATARS_CONFIRM_JOBS_ABOVE = 6

    response = signed_in.post("/batches/new/", batch_form(subject))

    assert response.status_code == 302


# What a person can type in a count box: plain numbers, and what a number box or a paste
# lets through besides (a review found "3.0" planned 3 jobs from a button naming 0).
COUNTS = st.one_of(
    st.integers(0, 9),
    st.integers(0, 9).map(lambda n: f"{n}.0"),
    st.sampled_from(["", " 2 ", "+3", "-1", "03", "\uff13", "1e1", "2,0", "abc", "9" * 30]),
    st.text(max_size=4),
)
FORM_INPUTS = st.fixed_dictionaries(
    {
        "candidates_openai": COUNTS,
        "candidates_flux": COUNTS,
        "candidates_google": COUNTS,
        "frames": st.lists(st.sampled_from(engine.FRAMES), max_size=6),
    }
)


@hsettings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(inputs=FORM_INPUTS)
def test_it_shows_the_number_of_tasks_the_engine_plans(subject, inputs: dict[str, Any]):
    """Whatever is typed, the form plans nothing or exactly what its button names."""
    data = {"prompt": "a portrait", "subjects": [subject.pk], "token": secrets.token_urlsafe(24)}
    form = BatchForm({**data, **inputs})
    shown = form.paid_jobs()

    if not form.is_valid():
        assert form.errors  # said beside the box or the section, nothing planned
        return
    batch = engine.generate(request=form.to_request())
    assert batch.tasks.count() == shown, f"the button named {shown} for {inputs}"


@pytest.mark.parametrize("typed", ["3.0", "+3", "\uff13", "1e1"])
def test_a_count_the_button_reads_as_zero_plans_nothing_and_says_why(
    signed_in: Client, subject, typed
):
    """Found by a review: "3.0" was read as 0 by the button and as 3 by the form."""
    response = signed_in.post(
        "/batches/new/",
        batch_form(subject, candidates_openai=typed, candidates_flux=0, start="0"),
    )

    assert response.status_code == 400
    assert "Enter a whole number, like 2 (0 leaves it out)." in text(response)
    assert not Batch.objects.exists()


def test_an_empty_count_box_leaves_its_provider_out(signed_in: Client, subject):
    response = signed_in.post(
        "/batches/new/", batch_form(subject, candidates_openai="", candidates_flux=2, start="4")
    )

    assert response.status_code == 302
    assert {t.provider for t in Batch.objects.get().tasks.all()} == {"flux"}


# --- 9. form errors ----------------------------------------------------------------------------


def test_it_shows_every_error_beside_its_section_at_once(signed_in: Client, subject):
    form = batch_form(
        subject, prompt="", subjects=[], frames=[], candidates_openai=0, candidates_flux=0
    )

    response = signed_in.post("/batches/new/", form)

    assert response.status_code == 400
    assert "This field is required." in text(response)
    assert "Choose at least one subject." in fieldset(response, "Subjects")
    assert "Choose at least one provider." in fieldset(response, "Providers")
    assert "Choose at least one frame." in fieldset(response, "Frames")


def test_it_shows_the_batch_size_cap_with_other_errors(signed_in: Client, subject, settings):
    settings.AVATARS_MAX_TASKS_PER_BATCH = 5

    response = signed_in.post("/batches/new/", batch_form(subject, subjects=[]))

    assert "Choose at least one subject." in fieldset(response, "Subjects")
    assert "This batch would make 6 tasks; the limit is 5." in fieldset(response, "Providers")


def test_it_refuses_photos_of_subjects_that_are_not_ticked(
    signed_in: Client, subject, make_subject, make_reference
):
    bo = make_subject("Bo")
    photo = make_reference(bo)

    response = signed_in.post("/batches/new/", batch_form(subject, references=[photo.pk]))

    assert response.status_code == 400
    assert (
        f"{photo.file_name} is a photo of no ticked subject: tick the subject or untick the photo."
        in fieldset(response, "Reference photos")
    )
    assert not Batch.objects.exists()


def test_it_flags_a_ticked_subject_without_photos_before_paying(
    signed_in: Client, subject, make_subject
):
    bare = make_subject("Bo")

    offered = text(signed_in.get("/batches/new/"))
    response = signed_in.post("/batches/new/", batch_form(subject, subjects=[subject.pk, bare.pk]))

    assert "Bo (no photos yet)" in offered and "Ada (no photos yet)" not in offered
    assert response.status_code == 400
    assert (
        "Bo has no reference photos yet: add some on the Subjects page, or untick it."
        in fieldset(response, "Subjects")
    )
    assert not Batch.objects.exists()


def test_it_flags_a_bare_subject_while_some_photo_belongs_to_no_subject(
    signed_in: Client, subject, make_subject
):
    bare = make_subject("Bo")
    Asset.objects.create_stored(
        originals.save(png_bytes(77)), file_name="orphan.png", origin=Origin.UPLOADED
    )

    response = signed_in.post("/batches/new/", batch_form(subject, subjects=[subject.pk, bare.pk]))

    assert "Bo has no reference photos yet" in fieldset(response, "Subjects")


def test_it_puts_the_limits_the_server_checks_on_the_inputs(signed_in: Client, subject, settings):
    settings.AVATARS_MAX_REFERENCES = 5
    response = signed_in.get("/batches/new/")
    body = response.content.decode()

    for key in ("openai", "flux", "google"):
        tag = re.search(rf'<input[^>]*name="candidates_{key}"[^>]*>', body)
        assert tag and 'min="0"' in tag.group(0) and 'max="8"' in tag.group(0), key
    assert re.search(r'<textarea[^>]*maxlength="4000"', body)
    assert "up to 8" in fieldset(response, "Providers")
    assert "Up to 5 photos" in fieldset(response, "Reference photos")
