"""The batch pages as a family uses them: the spend seen before it happens, honest outcomes."""

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
from studio.models import Asset, Batch, Origin, Subject, Task, TaskState
from studio.store import move
from studio.web.forms import BatchForm
from tests.conftest import batch_request, png_bytes
from tests.test_pages import batch_form, fieldset, generated, text

pytestmark = pytest.mark.django_db

TIMES, DASH = "\u00d7", "\u2013"  # as the pages write them


@pytest.fixture
def person(db: None) -> User:
    return User.objects.create_user("grace", password="not-a-real-password")


@pytest.fixture
def signed_in(client: Client, person: User) -> Client:
    client.force_login(person)
    return client


def plan(subject: Subject, candidates: int = 2, **overrides: Any) -> Batch:
    providers = [{"provider": "openai", "candidates": candidates}]
    return engine.generate(request=batch_request(subject, providers=providers, **overrides))


def batch_of(subject: Subject, tasks: int) -> Batch:
    """Plan a batch of `tasks` images, spread over the providers eight at a time."""
    providers = [
        {"provider": key, "candidates": min(8, tasks - 8 * n)}
        for n, key in enumerate(("openai", "flux", "google"))
        if tasks > 8 * n
    ]
    return engine.generate(request=batch_request(subject, providers=providers))


def put(batch: Batch, *states: TaskState) -> list[Task]:
    """Move the batch's tasks, in order, to `states` (an image for the done ones)."""
    tasks = list(batch.tasks.order_by("provider", "frame", "ordinal"))
    for seed, (task, state) in enumerate(zip(tasks, states, strict=False)):
        asset = generated(seed + 100) if state == TaskState.DONE else None
        move(task, state, phase="Moved", **({"asset": asset} if asset else {}))
    return tasks


def title_of(response: Any) -> str:
    found = re.search(r"<title>(.*?)</title>", response.content.decode(), re.S)
    assert found, "the answer has no title"
    return " ".join(found.group(1).split())


# --- 1. one intent, one payment ----------------------------------------------------------


def test_it_asks_before_starting_the_same_batch_again_within_ten_minutes(
    signed_in: Client, subject
):
    first = signed_in.post("/batches/new/", batch_form(subject))

    again = signed_in.post("/batches/new/", batch_form(subject))  # a new token, same intent

    batch = Batch.objects.get()
    assert first.status_code == 302 and again.status_code == 200
    assert "You started the same batch 1 minute ago" in text(again)
    assert f'href="/batches/{batch.pk}/"' in again.content.decode()
    assert "Start it again on purpose" in text(again)
    assert Task.objects.count() == 6


def test_it_says_how_many_minutes_ago_the_same_batch_was_started(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))
    Batch.objects.update(created_at=timezone.now() - timedelta(minutes=7, seconds=10))

    again = signed_in.post("/batches/new/", batch_form(subject))

    assert "You started the same batch 7 minutes ago" in text(again)
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


def test_it_plans_a_different_batch_without_asking(signed_in: Client, subject):
    signed_in.post("/batches/new/", batch_form(subject))

    other = signed_in.post("/batches/new/", batch_form(subject, frames=["image"]))

    assert other.status_code == 302
    assert Batch.objects.count() == 2


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


FORM_INPUTS = st.fixed_dictionaries(
    {
        "candidates_openai": st.integers(0, 8),
        "candidates_flux": st.integers(0, 8),
        "candidates_google": st.integers(0, 8),
        "frames": st.lists(st.sampled_from(engine.FRAMES), max_size=6),
    }
)


@hsettings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(inputs=FORM_INPUTS)
def test_it_shows_the_number_of_tasks_the_engine_plans(subject, inputs: dict[str, Any]):
    data = {"prompt": "a portrait", "subjects": [subject.pk], "token": secrets.token_urlsafe(24)}
    form = BatchForm({**data, **inputs})
    shown = form.paid_jobs()

    if not form.is_valid():
        assert shown == 0, form.errors  # nothing to start: no provider or no frame
        return
    batch = engine.generate(request=form.to_request())
    assert batch.tasks.count() == shown


# --- 3. the Batches page -----------------------------------------------------------------


def test_it_lists_batches_newest_first_a_page_at_a_time(signed_in: Client, subject):
    now = timezone.now()
    for n in range(25):
        batch = plan(subject, candidates=1, title=f"Batch {n:02}")
        Batch.objects.filter(pk=batch.pk).update(created_at=now - timedelta(minutes=n))

    first, second = text(signed_in.get("/")), text(signed_in.get("/?page=2"))

    assert re.findall(r"Batch \d\d", first) == [f"Batch {n:02}" for n in range(20)]
    assert re.findall(r"Batch \d\d", second) == [f"Batch {n:02}" for n in range(20, 25)]
    assert "Older" in first and "Newer" in second and "Older" not in second


def test_it_shows_each_batchs_outcome_and_four_of_its_images(signed_in: Client, subject):
    batch = plan(subject, candidates=6)
    tasks = put(batch, *[TaskState.DONE] * 5, TaskState.FAILED)

    response = signed_in.get("/")

    assert "5 ready · 1 failed" in text(response)
    shown = re.findall(r'src="/assets/(\d+)/thumb/128/"', response.content.decode())
    tasks = [Task.objects.get(pk=t.pk) for t in tasks]
    assert shown == [str(t.asset_id) for t in tasks[:4]]


# --- 4. honest progress --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "words", "title"),
    [
        ([TaskState.DONE] * 2 + [TaskState.CANCELLED] * 22, "2 ready · 22 cancelled", "All done"),
        (
            [TaskState.DONE] * 3 + [TaskState.FAILED] + [TaskState.QUEUED] * 4,
            "3 ready · 4 in progress · 1 failed",
            "3 of 8 ready",
        ),
        (
            [TaskState.UNCERTAIN, TaskState.HISTORY_MISSING],
            "2 need attention",
            "0 of 2 ready",
        ),
    ],
)
def test_it_says_what_came_of_a_batch_in_words_on_both_pages(
    signed_in: Client, subject, states: list[TaskState], words: str, title: str
):
    batch = batch_of(subject, len(states))
    put(batch, *states)

    page = signed_in.get(f"/batches/{batch.pk}/")
    home = signed_in.get("/")

    assert words in text(page)
    assert words in text(home)
    assert title_of(page) == f"{title} {DASH} Spring avatars · Avatars"
    assert "finished" not in text(page)


def test_it_keeps_green_for_ready_images(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.CANCELLED, TaskState.FAILED)

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert "seg-ready" not in body
    assert 'class="segment seg-cancelled"' in body and 'class="segment seg-failed"' in body


def test_it_puts_progress_in_the_tab_title_as_it_polls(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE)

    polled = signed_in.get(f"/batches/{batch.pk}/progress/", HTTP_HX_REQUEST="true")

    assert title_of(polled) == f"1 of 2 ready {DASH} Spring avatars · Avatars"


# --- 5. stuck tasks --------------------------------------------------------------------------


def stuck_batch(subject: Subject) -> Batch:
    batch = plan(subject, candidates=4)
    tasks = list(batch.tasks.order_by("ordinal"))
    move(
        tasks[0],
        TaskState.UNCERTAIN,
        phase="Reconcile before retry",
        error="Ember may have received it (The connection to Ember failed after sending "
        "(RemoteProtocolError).)",
    )
    move(tasks[1], TaskState.HISTORY_MISSING, phase="Reconcile before retry")
    move(tasks[2], TaskState.COPY_FAILED, phase="Copy failed")
    return batch


def test_it_says_stuck_tasks_in_plain_words_with_what_happens_next(signed_in: Client, subject):
    batch = stuck_batch(subject)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Needs an operator: Ember may have received this" in page
    assert "Image saved, waiting for Ember's record" in page
    assert "Made by Ember, not saved here yet" in page
    assert "An operator checks with Ember before anything is sent again" in page
    assert "3 need attention" in page
    for engineers in ("history_missing", "uncertain", "copy_failed", "Reconcile before retry"):
        assert engineers not in page
    assert "RemoteProtocolError" not in page
    assert "The connection to Ember failed after sending" in page  # the reason stays
    assert "Repair in admin" not in page  # not staff


def test_it_links_staff_to_the_admin_list_of_this_batchs_stuck_tasks(
    signed_in: Client, subject, person
):
    batch = stuck_batch(subject)
    plan(subject, candidates=1)  # another batch's tasks stay out of the list
    person.is_staff = person.is_superuser = True
    person.save()

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()
    link = re.search(r'<a href="([^"]+)">Repair in admin</a>', body)

    assert link, "no repair link for staff"
    listed = signed_in.get(link.group(1).replace("&amp;", "&"))
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 3
    assert {t.state for t in listed.context["cl"].result_list} == {
        "uncertain",
        "history_missing",
        "copy_failed",
    }


def test_it_offers_cancel_only_on_tasks_that_can_still_be_cancelled(signed_in: Client, subject):
    batch = stuck_batch(subject)  # three stuck, one queued

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert body.count(">Cancel</button>") == 1
    queued = batch.tasks.get(state=TaskState.QUEUED)
    assert f'action="/tasks/{queued.pk}/cancel/"' in body


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


# --- 10. live progress that keeps focus --------------------------------------------------------


def seen_of(response: Any) -> str:
    found = re.search(r"hx-vals='(\{[^']*\})'", response.content.decode())
    assert found, "the summary does not poll"
    return found.group(1)


def test_it_sends_only_the_rows_that_changed_since_the_last_look(signed_in: Client, subject):
    batch = plan(subject, candidates=3)
    page = signed_in.get(f"/batches/{batch.pk}/")
    vals = re.search(r'"seen": "([\d.]*)", "delivered": "(\d+)"', seen_of(page))
    assert vals
    seen, delivered = vals.groups()
    moved = batch.tasks.order_by("ordinal")[1]
    move(moved, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    polled = signed_in.get(
        f"/batches/{batch.pk}/progress/",
        {"seen": seen, "delivered": delivered},
        HTTP_HX_REQUEST="true",
    )

    body = polled.content.decode()
    swapped = re.findall(r'<tr id="task-([0-9a-f-]+)"[^>]*hx-swap-oob="true"', body)
    assert swapped == [str(moved.pk)]
    assert "HX-Trigger" not in polled  # no new image
    assert 'id="progress-summary"' in body


def test_it_tells_the_results_to_reload_when_an_image_arrives(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE)

    same = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "1"})
    more = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "0"})

    assert "HX-Trigger" not in same
    assert more["HX-Trigger"] == "results-changed"


# --- 11. provider labels -------------------------------------------------------------------------


def test_it_names_providers_by_label_on_the_batch_pages(signed_in: Client, subject):
    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "flux", "candidates": 1},
                {"provider": "google", "candidates": 1},
            ],
        )
    )

    pages = [
        text(signed_in.get(url))
        for url in ("/", f"/batches/{batch.pk}/", f"/batches/{batch.pk}/progress/", "/batches/new/")
    ]

    for page in pages:
        for key in ("openai", "google", "flux "):
            assert key not in page
    assert "FLUX" in pages[1] and "Imagen" in pages[1]
