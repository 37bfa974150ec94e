"""The JSON API's batches: asking for one, reading it, cancelling it, its caps (docs/api.md)."""

import json

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from studio import curation, engine
from studio.models import (
    Attempt,
    Batch,
    Subject,
    Task,
    TaskState,
)
from studio.store import move
from tests.api.calls import API, error, post_json
from tests.factories import (
    a_batch,
    batch_request,
    png_bytes,
    stored_asset,
)

pytestmark = pytest.mark.django_db


TASK_KEYS = {
    "id",
    "batch",
    "kind",
    "state",
    "phase",
    "error",
    "provider",
    "provider_label",
    "model",
    "frame",
    "ordinal",
    "ember_job_id",
    "attempts",
    "protection_released",
    "asset",
    "retry_at",
}


# --- batches --------------------------------------------------------------------


def test_it_accepts_a_batch_with_202_and_sends_nothing_to_ember(api, subject, ember):
    request = batch_request(
        subject,
        providers=[
            {"provider": "openai", "candidates": 2},
            {"provider": "flux", "model": "flux-pro"},
        ],
        frames=["image", "clip"],
    )

    response = post_json(api, f"{API}/batches", request)

    assert response.status_code == 202
    batch = Batch.objects.get()
    assert response["Location"] == f"{API}/batches/{batch.pk}"
    body = response.json()
    assert set(body) == {"id", "title", "created_at", "request", "tasks", "progress"}
    assert body["id"] == str(batch.pk)
    assert body["title"] == "Spring avatars"
    # Ids are strings, in the request as planned too (a review found numbers there).
    assert body["request"]["subjects"] == [str(subject.pk)]
    assert body["request"]["references"] == [str(i) for i in batch.request["references"]]
    assert body["request"]["references"], "the subject has a reference photo"
    assert len(body["tasks"]) == 6  # (2 openai + 1 flux) x (image + clip)
    assert all(set(t) == TASK_KEYS for t in body["tasks"])
    assert {t["state"] for t in body["tasks"]} == {"queued"}
    assert {(t["provider"], t["provider_label"], t["model"]) for t in body["tasks"]} == {
        ("openai", "GPT Image", "gpt-image-1"),
        ("flux", "FLUX", "flux-pro"),
    }
    assert sorted(t["kind"] for t in body["tasks"]) == ["clip"] * 3 + ["image"] * 3
    assert body["progress"]["queued"] == body["progress"]["total"] == 6
    assert body["progress"]["finished"] == 0
    assert len(ember.calls) == 0  # the worker sends it, later
    assert not any(route.called for route in ember.routes)


def test_it_records_who_asked_for_a_batch(api, subject):
    post_json(api, f"{API}/batches", batch_request(subject))

    assert Batch.objects.get().created_by == User.objects.get(username="family-script")


def test_it_shows_a_batch_with_its_tasks_and_progress(api, subject):
    batch = a_batch(subject, candidates=3)
    first, second, _third = batch.tasks.order_by("ordinal")
    move(first, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())
    Attempt.objects.create(
        task=first,
        number=1,
        ember_job_id="job_1",
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.ACCEPTED,
    )
    engine.cancel_task(task=second)

    response = api.get(f"{API}/batches/{batch.pk}")

    assert response.status_code == 200
    body = response.json()
    tasks = {t["id"]: t for t in body["tasks"]}
    assert tasks[str(first.pk)]["state"] == "running"
    assert tasks[str(first.pk)]["ember_job_id"] == "job_1"
    assert tasks[str(first.pk)]["attempts"] == 1
    assert tasks[str(second.pk)]["state"] == "cancelled"
    assert tasks[str(second.pk)]["attempts"] == 0
    progress = body["progress"]
    assert (progress["running"], progress["cancelled"], progress["queued"]) == (1, 1, 1)
    assert (progress["total"], progress["finished"]) == (3, 1)


def test_its_progress_counts_a_send_in_flight_as_paid(api, subject):
    """Ember may have charged before its answer is read: the count says so at once."""
    [sending, _queued] = a_batch(subject, candidates=2).tasks.all()
    move(sending, TaskState.SUBMITTING, submitted_at=timezone.now(), phase="Sending to Ember")

    progress = api.get(f"{API}/batches/{sending.batch_id}").json()["progress"]

    assert (progress["submitting"], progress["sending"], progress["paid_requests"]) == (1, 1, 1)


def test_it_reads_a_large_batch_in_as_many_queries_as_a_small_one(
    api, subject, django_assert_max_num_queries
):
    small, large = a_batch(subject, candidates=1), a_batch(subject, candidates=8)
    for task in large.tasks.all():
        Attempt.objects.create(
            task=task, number=1, submitted_at=timezone.now(), outcome=Attempt.Outcome.UNKNOWN
        )
    api.get(f"{API}/batches/{small.pk}")  # the token's last use is recorded once

    with django_assert_max_num_queries(6) as small_queries:
        api.get(f"{API}/batches/{small.pk}")
    with django_assert_max_num_queries(len(small_queries)):
        response = api.get(f"{API}/batches/{large.pk}")

    assert [t["attempts"] for t in response.json()["tasks"]] == [1] * 8


def test_it_cancels_a_batch_and_reports_the_cancelled_the_kept_and_the_ended(api, subject):
    """The rest is reported whole (a review read a batch whose tasks had all ended answer
    `{"cancelled": [], "kept": []}`): every task is in one of the three lists."""
    batch = a_batch(subject, candidates=4)
    queued, preparing, running, failed = batch.tasks.order_by("ordinal")
    move(preparing, TaskState.PREPARING, phase="Checking reference photos")
    move(running, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())
    move(failed, TaskState.FAILED, phase="Ember says the job failed")

    response = api.post(f"{API}/batches/{batch.pk}/cancel")

    assert response.status_code == 200
    body = response.json()
    assert sorted(body["cancelled"]) == sorted([str(queued.pk), str(preparing.pk)])
    assert body["kept"] == [str(running.pk)]
    assert body["ended"] == [str(failed.pk)]
    assert dict(batch.tasks.values_list("pk", "state")) == {
        queued.pk: TaskState.CANCELLED,
        preparing.pk: TaskState.CANCELLED,
        running.pk: TaskState.RUNNING,
        failed.pk: TaskState.FAILED,
    }


@pytest.mark.parametrize(
    ("make_body", "message"),
    [
        (lambda s: batch_request(s, prompt="   "), "The prompt must not be empty."),
        (lambda s: batch_request(s, subjects=[s.pk + 1000]), "Unknown subject: {unknown}."),
        (lambda s: batch_request(s, subjects=[]), "Choose at least one subject."),
        (lambda s: batch_request(s, providers=[]), "Choose at least one provider."),
        (
            lambda s: batch_request(s, providers=[{"provider": "midjourney"}]),
            'Unknown provider: "midjourney".',
        ),
        (
            lambda s: batch_request(s, providers=[{"provider": "openai", "candidates": 0}]),
            "Candidates must be between 1 and 8.",
        ),
        (
            lambda s: batch_request(s, providers=[{"provider": "openai", "candidates": 9}]),
            "Candidates must be between 1 and 8.",
        ),
        (
            lambda s: batch_request(
                s,
                providers=[
                    {"provider": "openai", "model": f"model-{i}", "candidates": 8} for i in range(7)
                ],
                frames=["image", "headshot", "full-body", "clip"],
            ),
            # Made-up models no longer multiply one provider's candidates past the caps.
            'Unknown model for provider "openai": "model-0". Its models are gpt-image-1.',
        ),
        (lambda s: batch_request(s, references=[999_999]), "Unknown reference photo: 999999."),
        (
            lambda s: batch_request(s, frames=["portrait"]),
            'Unknown frame: "portrait". Frames are image, headshot, full-body, clip.',
        ),
        (lambda s: ["a list, not a batch"], "The request body must be a JSON object."),
        (lambda s: '{"prompt": "a portrait", ', "The request body is not valid JSON."),
        # Deep enough to parse, too deep to walk: ninja's own "Cannot parse request body".
        (
            lambda s: '{"x": ' + "[" * 600 + "]" * 600 + "}",
            "The request body is nested too deeply to read.",
        ),
        (
            lambda s: '{"x": ' + "[" * 5000 + "]" * 5000 + "}",
            "The request body is nested too deeply to read.",
        ),
        (lambda s: batch_request(s, prompt="\u202e\u200b"), "The prompt must not be empty."),
    ],
    ids=[
        "empty-prompt",
        "unknown-subject",
        "no-subject",
        "no-provider",
        "unknown-provider",
        "candidates-0",
        "candidates-9",
        "made-up-models",
        "unknown-reference",
        "unknown-frame",
        "not-an-object",
        "malformed-json",
        "nested-600-deep",
        "nested-5000-deep",
        "invisible-prompt",
    ],
)
def test_it_refuses_a_bad_batch_and_creates_nothing(api, subject, ember, make_body, message):
    body = make_body(subject)
    raw = body if isinstance(body, str) else json.dumps(body)

    response = api.post(f"{API}/batches", raw, content_type="application/json")

    assert response.status_code == 400
    assert error(response)["message"] == message.format(unknown=subject.pk + 1000)
    assert not Batch.objects.exists()
    assert not Task.objects.exists()
    assert len(ember.calls) == 0


MANY = list(range(1, 300_002))  # past any database's parameters for one query


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"subjects": MANY}, "Subjects may name at most 100 ids, not 300001."),
        ({"references": MANY}, "References may name at most 1000 ids, not 300001."),
    ],
    ids=["subjects", "references"],
)
def test_it_refuses_a_list_of_ids_too_long_to_look_up_with_a_400(api, subject, overrides, message):
    """Found by a review: 250,001 ids were a 500 (too many SQL variables)."""
    response = post_json(api, f"{API}/batches", {**batch_request(subject), **overrides})

    assert response.status_code == 400
    assert error(response)["message"] == message
    assert not Batch.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"providers": [{"provider": ["openai"]}]}, 'Unknown provider: ["openai"].'),
        ({"subjects": [10**30]}, f"Unknown subject: {10**30}."),
        ({"subjects": [1.5]}, "Subjects must be a list of ids; 1.5 is not one."),
    ],
    ids=["provider-not-text", "subject-id-out-of-range", "subject-id-not-whole"],
)
def test_it_refuses_a_batch_with_odd_values_with_a_400_not_a_crash(
    api, subject, overrides, message
):
    response = post_json(api, f"{API}/batches", batch_request(subject, **overrides))

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_request", "message": message}
    assert not Batch.objects.exists()


EIGHT = [{"provider": "openai", "candidates": 8}]


@pytest.mark.parametrize(
    ("setting", "value", "make_body", "message"),
    [
        (
            "AVATARS_MAX_TASKS_PER_BATCH",
            50,
            lambda s: batch_request(
                s,
                providers=[{"provider": p, "candidates": 8} for p in ("openai", "flux", "google")],
                frames=["image", "headshot", "full-body"],
            ),
            "This batch would make 72 tasks; the limit is 50.",
        ),
        (
            "AVATARS_MAX_REFERENCES",
            1,
            lambda s: batch_request(s),
            "This batch would send 2 reference photos (every photo of its subjects); "
            "the limit is 1.",
        ),
        (
            "AVATARS_MAX_REFERENCE_BYTES",
            100,
            lambda s: batch_request(s),
            "The reference photos come to {size:,} bytes; the limit is 100 bytes.",
        ),
    ],
    ids=["tasks-per-batch", "references", "reference-bytes"],
)
def test_it_refuses_a_batch_past_a_configured_cap_with_400_and_the_numbers(
    api, subject, make_reference, settings, setting, value, make_body, message
):
    make_reference(subject)  # two photos
    setattr(settings, setting, value)

    response = post_json(api, f"{API}/batches", make_body(subject))

    assert response.status_code == 400
    expected = message.format(size=sum(a.size for a in subject.assets.all()))
    assert error(response) == {"code": "invalid_request", "message": expected}, f"{setting}={value}"
    assert not Batch.objects.exists()


def test_it_takes_a_whole_number_written_with_a_point_as_the_document_does(api, subject):
    """Found by a review's Schemathesis run: 2.0 is an integer to JSON Schema, and the
    document's `candidates` is one; the API refused it as not a whole number."""
    providers = [{"provider": "openai", "candidates": 2.0}]

    response = post_json(api, f"{API}/batches", batch_request(subject, providers=providers))

    assert response.status_code == 202, response.content
    assert Batch.objects.get().tasks.count() == 2


def test_it_refuses_one_provider_split_past_eight_candidates_with_400(api, subject):
    providers = [
        {"provider": "flux", "model": "flux-dev", "candidates": 4},
        {"provider": "flux", "model": "flux-pro", "candidates": 5},
    ]

    response = post_json(api, f"{API}/batches", batch_request(subject, providers=providers))

    assert response.status_code == 400
    assert error(response)["message"] == (
        'Provider "flux" has 9 candidates across its rows; the limit is 8 per provider.'
    ), "4 + 5 > 8"
    assert not Batch.objects.exists()


def test_it_answers_429_with_the_numbers_once_the_daily_cap_is_reached(api, subject, settings):
    settings.AVATARS_DAILY_TASK_CAP = 20
    first = post_json(api, f"{API}/batches", batch_request(subject, providers=EIGHT))
    second = post_json(api, f"{API}/batches", batch_request(subject, providers=EIGHT))

    third = post_json(api, f"{API}/batches", batch_request(subject, providers=EIGHT))

    assert (first.status_code, second.status_code, third.status_code) == (202, 202, 429)
    assert error(third) == {
        "code": "daily_cap_reached",
        "message": "You have planned 16 paid tasks in the last 24 hours; "
        "this batch would make 8 more and the daily limit is 20. "
        "It fits in about 24 hours, when earlier tasks leave the window.",
    }, "16 + 8 > 20"
    wait = int(third["Retry-After"])
    assert 86400 - 60 < wait <= 86400, f"Retry-After: {wait} s (the first task leaves in 24 h)"
    assert Task.objects.count() == 16


def test_it_refuses_a_body_too_large_to_read_with_413_naming_the_limit(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

    response = post_json(api, f"{API}/subjects", {"name": "Ada", "notes": "x" * 1024 * 1024})

    assert response.status_code == 413
    assert error(response) == {
        "code": "too_large",
        "message": "The request body is too large (the limit is 1 MB for JSON and form fields; "
        "26 MB for an upload).",
    }
    assert not Subject.objects.exists()


def test_a_photo_removed_from_every_subject_is_not_sent_again(api, make_subject):
    """Found by a review: a photo removed from its subject (kept only because a set used it)
    was accepted as a reference of a new batch, and Ember was paid for a job carrying it."""
    ada, cy = make_subject("Ada"), make_subject("Cy")
    photo = engine.add_reference(subject=cy, data=png_bytes(21), file_name="private-cy.png")
    engine.add_reference(subject=ada, data=png_bytes(22), file_name="ada.png")
    engine.create_set(name="Cy's", asset_ids=[photo.pk])
    curation.remove_photo(photo=photo, subject=cy)

    response = post_json(api, f"{API}/batches", batch_request(ada, references=[str(photo.pk)]))

    assert response.status_code == 400
    assert error(response)["message"] == (
        f"Reference photo {photo.pk} was removed from its subjects; it is not sent again."
    )
    assert not Task.objects.exists()


def test_a_result_named_as_a_reference_photo_is_refused_saying_what_it_is(api, subject):
    """Found by a review: "Unknown reference photo: 7." for an asset that exists."""
    result = stored_asset(71)  # a generated image, not an upload

    response = post_json(api, f"{API}/batches", batch_request(subject, references=[result.pk]))

    assert response.status_code == 400
    assert error(response)["message"] == (
        f"Asset {result.pk} is a result, not a reference photo: a batch sends only uploaded photos."
    )
    assert not Batch.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (b'{"name": NaN}', "application/json", 400, "The request body holds NaN, which JSON"),
        (b'{"name": -Infinity}', "application/json", 400, "The request body holds -Infinity,"),
        (b'{"name": "one", "name": "two"}', "application/json", 400, 'names "name" twice'),
        ('{"name": "Ada"}'.encode("utf-16"), "application/json", 400, "must be JSON in UTF-8."),
        (b'{"name": "Ada"}', "text/plain", 415, 'this one was sent as "text/plain"'),
        (b'{"name": "Ada"}', "application/x-www-form-urlencoded", 415, "application/json"),
        (  # valid JSON: a review's 2.4 million digits were answered "not valid JSON"
            b'{"name": "Ada", "n": ' + b"9" * 2_400_000 + b"}",
            "application/json",
            400,
            "The request body holds a number of 2,400,000 digits; at most 4,300 are read.",
        ),
    ],
    ids=["nan", "infinity", "key-twice", "utf-16", "text-plain", "form", "digits"],
)
def test_it_refuses_a_body_that_is_not_json_said_as_json(api, body, content_type, status, message):
    """Found by a review over uvicorn: each of these was read as JSON and a subject made."""
    response = api.post(f"{API}/subjects", body, content_type=content_type)

    assert response.status_code == status, response.content
    assert message in error(response)["message"], error(response)["message"]
    assert not Subject.objects.exists()


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/ld+json"])
def test_it_reads_json_said_with_a_charset_or_as_a_json_type(api, content_type):
    response = api.post(f"{API}/subjects", b'{"name": "Ada"}', content_type=content_type)

    assert response.status_code == 201, response.content


def test_its_tasks_attempts_and_progress_are_read_as_of_one_moment(api, subject):
    """Found by a review polling every 50 ms: read in three statements, an answer showed a
    task `running` with 0 attempts (they are written together), and progress that
    disagreed with its own task list. One statement reads them all."""
    batch = a_batch(subject, candidates=3)
    first = batch.tasks.first()
    move(first, TaskState.SUBMITTING, submitted_at=timezone.now(), phase="Sending to Ember")
    api.get(f"{API}/batches/{batch.pk}")  # the token's last use is recorded once

    with CaptureQueriesContext(connection) as queries:
        body = api.get(f"{API}/batches/{batch.pk}").json()

    reads = [q["sql"] for q in queries if '"studio_task"' in q["sql"]]
    assert len(reads) == 1, f"{len(reads)} statements read the batch's tasks: {reads}"
    assert body["progress"] == {**engine.progress(batch=batch)}
    assert sum(body["progress"][t["state"]] == 0 for t in body["tasks"]) == 0
