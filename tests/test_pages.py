"""The studio pages: signed-in only, thin over the services, honest about outcomes."""

import html
import io
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from PIL import Image

from studio import engine, originals, thumbs
from studio.models import (
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    Origin,
    Subject,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.store import move
from tests.factories import a_batch, png_bytes, stored_asset
from tests.studio_pages import batch_form, fieldset, messages_of, part, text

pytestmark = pytest.mark.django_db

TOO_LATE = "This task has already been sent to Ember; the work is kept."
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


# --- the cast -------------------------------------------------------------------------


def send_to_ember(task: Task) -> Task:
    return move(
        task,
        TaskState.RUNNING,
        ember_job_id="job_1",
        submitted_at=timezone.now(),
        phase="Waiting for Ember",
    )


# --- sign-in ----------------------------------------------------------------------------


def every_route(subject: Subject, batch: Batch, asset: Asset, avatar_set: AvatarSet) -> list[str]:
    task = batch.tasks.first()
    assert task is not None
    return [
        reverse("studio:home"),
        reverse("studio:subjects"),
        reverse("studio:subject", args=[subject.pk]),
        reverse("studio:batch-new"),
        reverse("studio:batch", args=[batch.pk]),
        reverse("studio:batch-progress", args=[batch.pk]),
        reverse("studio:batch-cancel", args=[batch.pk]),
        reverse("studio:task-cancel", args=[task.pk]),
        reverse("studio:gallery"),
        reverse("studio:sets"),
        reverse("studio:set", args=[avatar_set.pk]),
        reverse("studio:set-publish", args=[avatar_set.pk]),
        reverse("studio:set-published", args=[avatar_set.pk]),
        reverse("studio:asset-thumb", args=[asset.pk, 256]),
        reverse("studio:asset-original", args=[asset.pk]),
    ]


def test_it_sends_an_anonymous_visitor_to_sign_in_from_every_page(client: Client, subject):
    batch = a_batch(subject, candidates=2)
    asset = stored_asset(1)
    avatar_set = engine.create_set(name="Family", asset_ids=[asset.pk])
    engine.publish(avatar_set=avatar_set)

    for url in every_route(subject, batch, asset, avatar_set):
        for method in (client.get, client.post):
            response = method(url)
            assert response.status_code == 302, url
            assert response["Location"].startswith(f"/accounts/login/?next={url}"), url
    assert Task.objects.filter(state=TaskState.CANCELLED).count() == 0
    assert AvatarSet.objects.get().version == avatar_set.version


def test_it_sends_a_poll_whose_session_expired_to_the_sign_in_page(client: Client, subject):
    batch = a_batch(subject, candidates=2)
    page = f"/batches/{batch.pk}/"

    response = client.get(
        f"{page}progress/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver{page}",
    )

    # Not a redirect that htmx would follow and swap into the page: a full navigation.
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/accounts/login/?next={page.replace('/', '%2F')}"
    assert not response.content


def test_it_signs_a_person_in_and_out(client: Client, person: User):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert "Sign in" in text(page)

    wrong = client.post("/accounts/login/", {"username": "grace", "password": "nope"})
    assert "did not match" in text(wrong)

    right = client.post(
        "/accounts/login/?next=/gallery/",
        {"username": "grace", "password": "not-a-real-password", "next": "/gallery/"},
    )
    assert right.status_code == 302 and right["Location"] == "/gallery/"
    assert client.get("/").status_code == 200

    out = client.post("/accounts/logout/", {"next": "/accounts/login/"})
    assert out.status_code == 302
    assert client.get("/").status_code == 302


def test_it_renders_every_page_for_a_signed_in_person(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    asset = stored_asset(1)
    avatar_set = engine.create_set(name="Family", asset_ids=[asset.pk])
    engine.publish(avatar_set=avatar_set)

    for name, args in [
        ("studio:home", []),
        ("studio:subjects", []),
        ("studio:subject", [subject.pk]),
        ("studio:batch-new", []),
        ("studio:batch", [batch.pk]),
        ("studio:batch-progress", [batch.pk]),
        ("studio:gallery", []),
        ("studio:sets", []),
        ("studio:set", [avatar_set.pk]),
        ("studio:set-published", [avatar_set.pk]),
    ]:
        response = signed_in.get(reverse(name, args=args))
        assert response.status_code == 200, name
    home = text(signed_in.get("/"))
    assert "Spring avatars" in home and "2 in progress" in home


def test_it_answers_404_for_what_does_not_exist(signed_in: Client):
    assert signed_in.get(f"/batches/{uuid.uuid4()}/").status_code == 404
    assert signed_in.get("/subjects/999999999999999999/").status_code == 404
    assert signed_in.get("/subjects/99999999999999999999999/").status_code == 404
    assert signed_in.get("/assets/1/thumb/256/").status_code == 404


# --- subjects and reference photos --------------------------------------------------


def test_it_creates_a_subject_and_shows_its_page(signed_in: Client):
    response = signed_in.post("/subjects/", {"name": "Ada Lovelace"}, follow=True)

    subject = Subject.objects.get()
    assert subject.name == "Ada Lovelace"
    assert response.redirect_chain[-1][0] == f"/subjects/{subject.pk}/"
    assert "Ada Lovelace" in text(response)
    assert "No reference photos yet." in text(response)


def test_it_refuses_a_subject_without_a_name(signed_in: Client):
    response = signed_in.post("/subjects/", {"name": "   "})

    assert response.status_code == 400
    assert "This field is required." in text(response)
    assert not Subject.objects.exists()


def test_it_shows_an_uploaded_photo_on_the_subject_page(signed_in: Client, make_subject):
    ada = make_subject("Ada")
    photo = SimpleUploadedFile("ada.png", png_bytes(7), content_type="image/png")

    response = signed_in.post(f"/subjects/{ada.pk}/", {"photo": photo}, follow=True)

    asset = Asset.objects.get()
    assert list(asset.subjects.all()) == [ada]
    assert asset.origin == Origin.UPLOADED
    assert "Added ada.png to Ada's photos." in messages_of(response)
    assert f'src="/assets/{asset.pk}/thumb/256/"' in response.content.decode()
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/").status_code == 200


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("notes.txt", b"just some text\n", "The file is not a PNG, JPEG, WebP or GIF image."),
        ("cut.png", png_bytes(3)[:-40], "The image could not be decoded"),
        (
            "page.png",
            b"<!doctype html><html><script>alert(1)</script></html>",
            "The file is not a PNG, JPEG, WebP or GIF image.",
        ),
        ("empty.png", b"", "The submitted file is empty."),
    ],
)
def test_it_shows_why_an_upload_is_refused_and_stores_nothing(
    signed_in: Client, make_subject, data_dir, name: str, data: bytes, error: str
):
    ada = make_subject("Ada")
    upload = SimpleUploadedFile(name, data, content_type="image/png")

    response = signed_in.post(f"/subjects/{ada.pk}/", {"photo": upload})

    assert response.status_code == 400
    assert error in text(response)
    assert not Asset.objects.exists()
    assert not any((data_dir / "originals").glob("*"))


def test_it_refuses_an_upload_without_a_file(signed_in: Client, make_subject):
    ada = make_subject("Ada")

    response = signed_in.post(f"/subjects/{ada.pk}/", {})

    assert response.status_code == 400
    assert "This field is required." in text(response)


# --- long lists, a page at a time ----------------------------------------------------

# Session, user, one page of rows, and one count over that page's rows (never every row).
LIST_PAGE_QUERIES = 4


def link(response: Any, label: str) -> str | None:
    """The pager link a person would click by its `label` ("Next", "Previous"), if shown."""
    found = re.search(rf'<a href="([^"]*)"[^>]*>[^<]*{label}', response.content.decode())
    return html.unescape(found.group(1)) if found else None


def walk(
    client: Client, url: str, row: str, assert_max_queries: Any
) -> tuple[list[int], list[Any]]:
    """Follow "Next" from `url`; return the ids of `row` links met in order, and the pages."""
    seen: list[int] = []
    pages: list[Any] = []
    next_url: str | None = url
    while next_url is not None:
        with assert_max_queries(LIST_PAGE_QUERIES):
            response = client.get(next_url if next_url.startswith("/") else url + next_url)
        assert response.status_code == 200
        pages.append(response)
        seen += [int(pk) for pk in re.findall(row, response.content.decode())]
        next_url = link(response, "Next")
    return seen, pages


def test_it_pages_the_subjects_by_name_each_once(
    signed_in: Client, make_reference, django_assert_max_num_queries
):
    names = ["Ada" if n % 3 == 0 else f"Subject {n:04}" for n in range(120)]
    Subject.objects.bulk_create(Subject(name=name, slug=f"s-{n}") for n, name in enumerate(names))
    by_name = list(Subject.objects.order_by("name", "pk").values_list("pk", flat=True))
    first = Subject.objects.get(pk=by_name[0])
    make_reference(first), make_reference(first)

    seen, pages = walk(
        signed_in, "/subjects/", r'href="/subjects/(\d+)/"', django_assert_max_num_queries
    )

    assert seen == by_name  # each subject once, by name, then by id among equal names
    assert [len(re.findall(r'href="/subjects/\d+/"', p.content.decode())) for p in pages] == [
        50,
        50,
        20,
    ]
    assert "Ada 2 photos" in text(pages[0])
    assert link(pages[0], "Previous") is None and link(pages[-1], "Next") is None
    back = signed_in.get("/subjects/" + (link(pages[1], "Previous") or ""))
    assert re.findall(r'href="/subjects/(\d+)/"', back.content.decode()) == [
        str(pk) for pk in by_name[:50]
    ]


def test_it_pages_a_subjects_reference_photos_newest_first_each_once(
    signed_in: Client, make_subject, django_assert_max_num_queries
):
    ada = make_subject("Ada")
    photos = Asset.objects.bulk_create(
        Asset(
            sha256=f"{n:064x}",
            file_name=f"ada-{n}.png",
            mime="image/png",
            width=64,
            height=48,
            size=100,
            origin=Origin.UPLOADED,
        )
        for n in range(120)
    )
    ada.assets.add(*photos)
    newest_first = list(ada.assets.order_by("-created_at", "-id").values_list("pk", flat=True))

    seen, pages = walk(
        signed_in,
        f"/subjects/{ada.pk}/",
        r'href="/assets/(\d+)/"',  # each photo opens in the viewer
        django_assert_max_num_queries,
    )

    assert seen == newest_first
    assert len(pages) == 3
    assert link(pages[0], "Previous") is None and link(pages[1], "Previous") is not None


@pytest.mark.parametrize("number", ["abc", "0", "-1", "²", "99999999999999999999", "1e3", "9999"])
def test_it_answers_an_odd_or_past_the_end_page_number_without_an_error(
    signed_in: Client, subject, number: str
):
    for url in ("/subjects/", f"/subjects/{subject.pk}/", "/sets/", "/gallery/"):
        response = signed_in.get(url, {"page": number})

        assert response.status_code == 200, url


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
        "This form had already planned this batch; nothing new was planned. "
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
        ({"candidates_openai": 9}, "Ensure this value is less than or equal to 8."),
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

    response = signed_in.post("/batches/new/", batch_form(subject))  # 6 more

    assert response.status_code == 400
    assert alert(response) == (
        "You have planned 4 paid tasks in the last 24 hours; "
        "this batch would make 6 more and the daily limit is 8."
    ), "4 + 6 > 8, said once for the whole form"
    assert Batch.objects.count() == 1


# --- the batch page ------------------------------------------------------------------


def test_it_shows_progress_states_and_paid_requests_in_the_partial(signed_in: Client, subject):
    batch = a_batch(subject, candidates=4)
    first, second, third, _fourth = batch.tasks.order_by("ordinal")
    asset = stored_asset(5)
    move(first, TaskState.DONE, phase="Complete", asset=asset)
    send_to_ember(second)
    move(third, TaskState.FAILED, phase="Failed", error="Ember said no.")
    for task in (first, second, third):
        Attempt.objects.create(
            task=task, number=1, submitted_at=timezone.now(), outcome=Attempt.Outcome.ACCEPTED
        )

    response = signed_in.get(f"/batches/{batch.pk}/progress/", HTTP_HX_REQUEST="true")

    page = text(response)
    body = response.content.decode()
    assert "1 ready · 2 in progress · 1 failed" in page
    assert "Paid Ember requests: 3" in page
    assert [m for m in re.findall(r'data-state="(\w+)"', body)] == [
        "done",
        "running",
        "failed",
        "queued",
    ]
    assert "Waiting for Ember" in page and "Ember said no." in page
    assert f'src="/assets/{asset.pk}/thumb/128/"' in body
    assert body.count("/thumb/") == 1
    assert 'hx-trigger="every 2s"' in body  # still polling: two tasks are not finished
    assert "<html" not in body  # a partial, not a page


def test_it_stops_polling_once_every_task_has_finished(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    for task in batch.tasks.all():
        move(task, TaskState.DONE, phase="Complete")

    body = signed_in.get(f"/batches/{batch.pk}/progress/").content.decode()

    assert "2 ready" in body and "All done" in body
    assert "hx-trigger" not in body
    assert "Cancel batch" not in body


def test_it_polls_the_progress_partial_from_the_batch_page(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert f'hx-get="/batches/{batch.pk}/progress/"' in body
    assert 'hx-trigger="every 2s"' in body
    assert "/static/studio/htmx.min.js" in body


def test_it_says_whether_a_worker_is_driving_the_tasks(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    assert "No worker seen yet" in text(signed_in.get(f"/batches/{batch.pk}/"))

    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")
    assert "Worker running" in text(signed_in.get(f"/batches/{batch.pk}/"))

    WorkerHeartbeat.objects.update(seen_at=now - timedelta(minutes=5))
    assert "No worker seen since" in text(signed_in.get(f"/batches/{batch.pk}/"))


def test_it_cancels_a_queued_task(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    task = batch.tasks.first()

    response = signed_in.post(f"/tasks/{task.pk}/cancel/", follow=True)

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert response.redirect_chain[-1][0] == f"/batches/{batch.pk}/"
    assert "Cancelled GPT Image image #1: nothing was sent to Ember." in messages_of(response)
    assert 'data-state="cancelled"' in response.content.decode()


def test_it_says_a_task_already_with_ember_is_kept_and_leaves_it_alone(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    task = send_to_ember(batch.tasks.first())
    version = task.version

    response = signed_in.post(f"/tasks/{task.pk}/cancel/", follow=True)

    task.refresh_from_db()
    assert task.state == TaskState.RUNNING
    assert task.version == version
    assert messages_of(response) == [TOO_LATE]
    assert TOO_LATE in text(response)


def test_it_cancels_what_it_can_in_a_batch_and_counts_what_it_kept(signed_in: Client, subject):
    batch = a_batch(subject, candidates=3)
    first, *_rest = batch.tasks.order_by("ordinal")
    send_to_ember(first)

    response = signed_in.post(f"/batches/{batch.pk}/cancel/", follow=True)

    states = sorted(batch.tasks.values_list("state", flat=True))
    assert states == ["cancelled", "cancelled", "running"]
    assert messages_of(response) == ["Cancelled 2 tasks; kept 1 already with Ember."]


def test_it_refuses_to_cancel_by_get(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)

    assert signed_in.get(f"/batches/{batch.pk}/cancel/").status_code == 405
    assert not batch.tasks.filter(state=TaskState.CANCELLED).exists()


def test_it_requires_the_csrf_token_to_cancel(person: User, subject):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(person)
    batch = a_batch(subject, candidates=2)

    assert browser.post(f"/batches/{batch.pk}/cancel/").status_code == 403
    assert not batch.tasks.filter(state=TaskState.CANCELLED).exists()


# --- gallery --------------------------------------------------------------------------


def test_it_shows_the_gallery_from_thumbnails_without_reading_originals(
    signed_in: Client, monkeypatch, django_assert_max_num_queries
):
    assets = [stored_asset(seed) for seed in range(80)]

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the gallery read an original")

    monkeypatch.setattr(originals, "read", refuse)
    # Session, user, the filters' subjects and batches, one page of assets, their subjects.
    with django_assert_max_num_queries(6):
        first = signed_in.get("/gallery/")
    with django_assert_max_num_queries(6):
        second = signed_in.get("/gallery/?page=2")

    body = first.content.decode()
    assert body.count('loading="lazy"') == 60
    assert f'src="/assets/{assets[-1].pk}/thumb/256/"' in body
    assert not re.search(r"<img[^>]+/original/", body)
    assert second.content.decode().count('loading="lazy"') == 20
    assert "Page 2" in text(second) and "Older" not in text(second)


def test_it_keeps_the_gallery_queries_constant_as_assets_grow(
    signed_in: Client, subject, django_assert_num_queries
):
    batches = [a_batch(subject, candidates=1) for _ in range(3)]
    for seed in range(3):
        stored_asset(seed, batch=batches[seed])
    # Session, user, the filters' subjects and batches, one page of assets with their
    # batches, and those assets' subjects: no COUNT over every asset.
    with django_assert_num_queries(6):
        few = signed_in.get("/gallery/")
    for seed in range(3, 50):
        stored_asset(seed, batch=batches[seed % 3])
    with django_assert_num_queries(6):
        many = signed_in.get("/gallery/")

    assert text(few).count("· Spring avatars") == 3
    assert text(many).count("· Spring avatars") == 50


def test_it_marks_generated_images_whose_history_is_missing_in_the_gallery(signed_in: Client):
    stored_asset(1, history_id="", label="Lost history")
    stored_asset(2, label="Fine")

    page = text(signed_in.get("/gallery/?origin=generated"))

    assert "Lost history history missing" in page
    assert "Fine history missing" not in page


# --- images ---------------------------------------------------------------------------


def test_it_serves_an_original_with_its_type_and_immutable_caching(signed_in: Client):
    data = png_bytes(11)
    asset = stored_asset(data=data, origin=Origin.UPLOADED)

    response = signed_in.get(f"/assets/{asset.pk}/original/")

    assert response.status_code == 200
    assert response.content == data
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{asset.sha256}"'

    again = signed_in.get(f"/assets/{asset.pk}/original/", HTTP_IF_NONE_MATCH=f'"{asset.sha256}"')
    assert again.status_code == 304


def test_it_answers_503_when_a_stored_original_fails_its_checksum(signed_in: Client):
    asset = stored_asset(12)
    path = originals.path_for(asset.sha256, ".png")
    path.write_bytes(png_bytes(13))

    response = signed_in.get(f"/assets/{asset.pk}/original/")

    assert response.status_code == 503
    assert response.content.decode() == "Stored original failed its checksum."


def test_it_serves_a_thumbnail_as_webp_with_immutable_caching(signed_in: Client):
    asset = stored_asset(14)

    response = signed_in.get(f"/assets/{asset.pk}/thumb/256/")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/webp"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{asset.sha256}-256"'
    with Image.open(io.BytesIO(response.content)) as img:
        assert img.format == "WEBP"
        assert max(img.size) <= 256


def test_it_serves_a_cached_thumbnail_without_opening_the_original(signed_in: Client, monkeypatch):
    asset = stored_asset(15)
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/").status_code == 200

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("the original was read for a cached thumbnail")

    monkeypatch.setattr(originals, "read", refuse)
    response = signed_in.get(f"/assets/{asset.pk}/thumb/256/")

    assert response.status_code == 200
    assert response.content == thumbs.path_for(asset.sha256, 256).read_bytes()


def test_it_rebuilds_a_thumbnail_whose_cache_file_was_deleted(signed_in: Client):
    asset = stored_asset(16)
    first = signed_in.get(f"/assets/{asset.pk}/thumb/128/").content
    thumbs.path_for(asset.sha256, 128).unlink()

    second = signed_in.get(f"/assets/{asset.pk}/thumb/128/")

    assert second.status_code == 200
    assert second.content == first
    assert thumbs.path_for(asset.sha256, 128).is_file()


def test_it_refuses_a_thumbnail_size_it_does_not_make(signed_in: Client):
    asset = stored_asset(17)

    assert signed_in.get(f"/assets/{asset.pk}/thumb/4096/").status_code == 404


def test_it_says_when_an_original_is_missing_from_the_store(signed_in: Client):
    asset = stored_asset(18)
    originals.path_for(asset.sha256, ".png").unlink()

    assert signed_in.get(f"/assets/{asset.pk}/original/").status_code == 503
    assert signed_in.get(f"/assets/{asset.pk}/thumb/256/").status_code == 503


# --- sets --------------------------------------------------------------------------------


def chosen_order(avatar_set: AvatarSet) -> list[int]:
    return list(avatar_set.items.order_by("position").values_list("asset_id", flat=True))


def test_it_creates_a_set_from_the_images_ticked_in_the_gallery(signed_in: Client):
    a, b = stored_asset(21), stored_asset(22)

    response = signed_in.post("/sets/", {"name": "Family", "assets": [b.pk, a.pk]}, follow=True)

    avatar_set = AvatarSet.objects.get()
    assert avatar_set.name == "Family"
    assert chosen_order(avatar_set) == [b.pk, a.pk]
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/"
    assert "Created the set Family." in messages_of(response)


def test_it_adds_orders_and_removes_chosen_images(signed_in: Client):
    a, b, c = stored_asset(31), stored_asset(32), stored_asset(33)
    avatar_set = engine.create_set(name="Family", asset_ids=[])
    url = f"/sets/{avatar_set.pk}/"

    signed_in.post(url, {"action": "add", "assets": [a.pk, b.pk, c.pk]})
    assert chosen_order(avatar_set) == [a.pk, b.pk, c.pk]

    signed_in.post(url, {"action": "up", "asset": c.pk})
    assert chosen_order(avatar_set) == [a.pk, c.pk, b.pk]

    signed_in.post(url, {"action": "down", "asset": a.pk})
    assert chosen_order(avatar_set) == [c.pk, a.pk, b.pk]

    signed_in.post(url, {"action": "remove", "asset": a.pk})
    assert chosen_order(avatar_set) == [c.pk, b.pk]

    page = signed_in.get(url).content.decode()
    chosen, offered = page.split("Add images", 1)
    assert chosen.index(f"/assets/{c.pk}/thumb/") < chosen.index(f"/assets/{b.pk}/thumb/")
    assert f'value="{a.pk}"' in offered and f'value="{b.pk}"' not in offered


def test_it_refuses_to_add_an_image_that_does_not_exist(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[])

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/", {"action": "add", "assets": [424242]}, follow=True
    )

    assert messages_of(response) == ["Unknown asset: 424242."]
    assert chosen_order(avatar_set) == []


def test_it_asks_for_ticked_images_before_adding_nothing(signed_in: Client):
    avatar_set = engine.create_set(name="Family", asset_ids=[])
    version = avatar_set.version

    response = signed_in.post(f"/sets/{avatar_set.pk}/", {"action": "add"}, follow=True)

    assert messages_of(response) == ["Tick the images to add first."]
    avatar_set.refresh_from_db()
    assert avatar_set.version == version


def test_it_publishes_a_set_and_shows_it_read_only(signed_in: Client):
    a, b = stored_asset(41, label="First"), stored_asset(42, label="Second")
    avatar_set = engine.create_set(name="Family", asset_ids=[b.pk, a.pk])

    response = signed_in.post(f"/sets/{avatar_set.pk}/publish/", {"confirm": "yes"}, follow=True)

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is not None
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/published/"
    page = text(response)
    assert "Published Family." in messages_of(response)
    assert page.index("1. Second") < page.index("2. First")
    body = response.content.decode()
    assert "<button" not in body.split("</header>", 1)[1]  # nothing to press: read-only
    assert f'href="/assets/{b.pk}/original/"' in body


def test_it_refuses_to_publish_with_the_guards_sentence_while_history_is_missing(
    signed_in: Client,
):
    fine, lost = stored_asset(51), stored_asset(52, history_id="")
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk, lost.pk])

    response = signed_in.post(f"/sets/{avatar_set.pk}/publish/", {"confirm": "yes"}, follow=True)

    avatar_set.refresh_from_db()
    assert avatar_set.published_at is None
    assert response.redirect_chain[-1][0] == f"/sets/{avatar_set.pk}/"
    assert messages_of(response) == [PUBLISH_REFUSED]
    assert PUBLISH_REFUSED in text(response)
    assert "1 chosen image still lacks Ember history" in text(response)
    assert signed_in.get(f"/sets/{avatar_set.pk}/published/").status_code == 404


def test_it_keeps_a_published_sets_choice_fixed(signed_in: Client):
    fine, lost = stored_asset(61), stored_asset(62, history_id="")
    avatar_set = engine.create_set(name="Family", asset_ids=[fine.pk])
    engine.publish(avatar_set=avatar_set)

    response = signed_in.post(
        f"/sets/{avatar_set.pk}/", {"action": "add", "assets": [lost.pk]}, follow=True
    )

    assert chosen_order(avatar_set) == [fine.pk]
    assert messages_of(response) == ["This set is published; its choice can no longer change."]


def test_it_pages_the_sets_newest_first_each_once(signed_in: Client, django_assert_max_num_queries):
    AvatarSet.objects.bulk_create(AvatarSet(name=f"Set {n}") for n in range(120))
    newest_first = list(
        AvatarSet.objects.order_by("-created_at", "-pk").values_list("pk", flat=True)
    )
    chosen = AvatarSet.objects.get(pk=newest_first[0])
    engine.choose_assets(avatar_set=chosen, asset_ids=[stored_asset(1).pk, stored_asset(2).pk])

    seen, pages = walk(signed_in, "/sets/", r'href="/sets/(\d+)/"', django_assert_max_num_queries)

    assert seen == newest_first
    assert len(pages) == 3
    assert f"{chosen.name} 2 draft" in text(pages[0])
