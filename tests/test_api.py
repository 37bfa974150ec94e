"""The JSON API (docs/api.md): every route, the shapes it answers, and what it refuses."""

import base64
import hashlib
import json
import threading
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.utils import timezone

from studio import engine, originals
from studio.api.auth import issue_token
from studio.engine import planning
from studio.models import (
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    Origin,
    SetItem,
    Subject,
    Task,
    TaskState,
)
from studio.store import Conflict, move
from tests import factories
from tests.factories import (
    a_batch,
    a_clip_sent_once,
    a_set,
    a_task,
    batch_request,
    history_route,
    png_bytes,
    stored_asset,
    uncertain,
)

pytestmark = pytest.mark.django_db

API = "/api/v1"
HISTORY = "/api/v1/history"
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
TOO_LATE = "This task has already been sent to Ember; the work is kept."
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
}
ASSET_KEYS = {
    "id",
    "sha256",
    "mime",
    "width",
    "height",
    "size",
    "label",
    "origin",
    "subjects",
    "task",
    "batch",
    "provider",
    "model",
    "ember_image_id",
    "ember_history_id",
    "created_at",
    "url",
}


# Generated images as the API shows them: with a provider, model and Ember image id.
generated_asset = partial(
    factories.generated_asset, provider="openai", model="gpt-image-1", ember_image_id="img_1"
)


def bearing(token: str) -> Client:
    """A client that sends `token` on every request, as a script would."""
    return Client(headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def api() -> Client:
    """A script's client, acting as a plain (non-staff) user."""
    return bearing(issue_token(user=User.objects.create_user("family-script")))


def allowed_to_change_tasks(user: User) -> User:
    """Grant `user` what the admin's repair actions need: the `studio.change_task` permission."""
    user.user_permissions.add(
        Permission.objects.get_by_natural_key("change_task", "studio", "task")
    )
    return user


@pytest.fixture
def staff_api() -> Client:
    """A client acting as a member of staff allowed to change tasks, as an operator is."""
    ops = allowed_to_change_tasks(User.objects.create_user("ops", is_staff=True))
    return bearing(issue_token(user=ops))


def post_json(client: Client, url: str, body: object) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def upload(client: Client, subject: Subject, data: bytes, name: str = "ada.png") -> Any:
    file = SimpleUploadedFile(name, data, content_type="image/png")
    return client.post(f"{API}/subjects/{subject.pk}/references", {"file": file})


def stored_originals(data_dir: Path) -> list[str]:
    directory = data_dir / "originals"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def error(response: Any) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return body["error"]


# --- subjects -------------------------------------------------------------------


def test_it_creates_a_subject(api):
    response = post_json(api, f"{API}/subjects", {"name": "Ada Lovelace"})

    assert response.status_code == 201
    subject = Subject.objects.get()
    assert response.json() == {
        "id": str(subject.pk),
        "name": "Ada Lovelace",
        "slug": "ada-lovelace",
    }


def test_it_lists_subjects_by_name(api, make_subject):
    grace, ada = make_subject("Grace"), make_subject("Ada")

    response = api.get(f"{API}/subjects")

    assert response.status_code == 200
    assert response.json() == {
        "items": [
            {"id": str(ada.pk), "name": "Ada", "slug": "ada"},
            {"id": str(grace.pk), "name": "Grace", "slug": "grace"},
        ],
        "next": None,
    }


def many_subjects(count: int) -> set[int]:
    """Create `count` subjects, a third of them sharing one name; return their ids."""
    names = ["Ada" if n % 3 == 0 else f"Subject {n:04}" for n in range(count)]
    Subject.objects.bulk_create(Subject(name=name, slug=f"s-{n}") for n, name in enumerate(names))
    return set(Subject.objects.values_list("pk", flat=True))


def test_it_pages_the_subjects_so_that_each_appears_exactly_once(
    api, django_assert_max_num_queries
):
    everyone = many_subjects(120)
    seen: list[int] = []
    url: str | None = f"{API}/subjects"
    sizes = []
    while url is not None:
        # The token, its last use (once a minute), one page: never a count of every row.
        with django_assert_max_num_queries(3):
            response = api.get(url)
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"items", "next"}
        sizes.append(len(body["items"]))
        seen += [int(item["id"]) for item in body["items"]]
        url = body["next"]

    assert sizes == [50, 50, 20]
    assert len(seen) == len(set(seen)) and set(seen) == everyone
    names = [(s.name, s.pk) for s in Subject.objects.in_bulk(seen).values()]
    assert [pk for _, pk in sorted(names)] == seen  # by name, then by id among equal names


def test_it_pages_on_from_where_it_was_when_subjects_are_added_meanwhile(api):
    many_subjects(60)
    first = api.get(f"{API}/subjects").json()
    last_seen = first["items"][-1]["name"]
    Subject.objects.create(name="Aaron", slug="aaron")  # before the cursor: not repeated
    Subject.objects.create(name="Zoe", slug="zoe")  # after it: still to come

    second = api.get(first["next"]).json()

    names = [item["name"] for item in second["items"]]
    assert "Zoe" in names and "Aaron" not in names
    assert all(name >= last_seen for name in names)
    assert second["next"] is None


def encoded(value: object) -> str:
    """Write `value` the way a cursor is written, to forge one."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not-a-cursor",
        "%%%",
        "eyJh",  # the base64 of a broken JSON text
        encoded([]),
        encoded(["Ada"]),
        encoded([1, 2]),
        encoded(["Ada", "1"]),
        encoded(["Ada", -1]),
        encoded(["Ada", True]),
        encoded(["Ada", 1.5]),
        encoded(["Ada", 1e30]),
        encoded(["Ada", 10**30]),
        encoded(["Ada", 1, 2]),
        encoded({"a": 1}),
        "x" * 5000,
    ],
)
def test_it_refuses_a_bad_cursor_with_a_400(api, make_subject, cursor):
    make_subject("Ada")

    response = api.get(f"{API}/subjects", {"cursor": cursor})

    assert response.status_code == 400
    assert error(response)["code"] == "invalid_cursor"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "   "}, "A subject needs a name."),
        ({}, "A subject needs a name."),
        ({"name": "x" * 121}, "A subject's name must be at most 120 characters."),
    ],
)
def test_it_refuses_a_subject_without_a_usable_name_and_creates_none(api, body, message):
    response = post_json(api, f"{API}/subjects", body)

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_request", "message": message}
    assert not Subject.objects.exists()


# --- reference uploads ----------------------------------------------------------


def test_it_stores_an_uploaded_reference_photo(api, make_subject, data_dir):
    ada = make_subject("Ada")
    data = png_bytes(7)

    response = upload(api, ada, data)

    assert response.status_code == 201
    body = response.json()
    asset = Asset.objects.get()
    assert set(body) == ASSET_KEYS
    assert body["id"] == str(asset.pk)
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert (body["mime"], body["width"], body["height"], body["size"]) == (
        "image/png",
        64,
        48,
        len(data),
    )
    assert body["origin"] == "uploaded"
    assert body["subjects"] == [str(ada.pk)]
    assert body["url"] == f"{API}/assets/{asset.pk}/original"
    assert stored_originals(data_dir) == [f"{body['sha256']}.png"]


def test_it_stores_a_generated_images_bytes_as_a_new_reference_photo(api, make_subject):
    data = png_bytes(9)
    generated = stored_asset(data=data)
    ada = make_subject("Ada")

    response = upload(api, ada, data)

    assert response.status_code == 201
    body = response.json()
    assert body["id"] != str(generated.pk)
    assert (body["origin"], body["subjects"]) == ("uploaded", [str(ada.pk)])
    assert list(ada.assets.filter(origin=Origin.UPLOADED).values_list("pk", flat=True)) == [
        int(body["id"])
    ]


def test_it_serves_an_uploaded_photo_back_byte_for_byte(api, make_subject):
    data = png_bytes(8)
    url = upload(api, make_subject("Ada"), data).json()["url"]

    response = api.get(url)

    assert response.status_code == 200
    assert response.content == data


def jpeg_bytes() -> bytes:
    return png_bytes(3, fmt="JPEG")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "notes.png",
            b"just some text, not a photo",
            "The file is not a PNG, JPEG, WebP or GIF image.",
        ),
        ("empty.png", b"", "The file is empty."),
        (
            "page.png",
            b"<!doctype html><html><body>hi</body></html>",
            "The file is not a PNG, JPEG, WebP or GIF image.",
        ),
        ("cut.png", png_bytes(9)[:120], "The image could not be decoded"),
        ("cut.jpg", jpeg_bytes()[: len(jpeg_bytes()) // 2], "The image could not be decoded"),
    ],
    ids=["text", "empty", "html-named-png", "truncated-png", "truncated-jpeg"],
)
def test_it_refuses_an_upload_that_is_not_an_image_and_stores_nothing(
    api, subject, data_dir, name, data, message
):
    assets, files = Asset.objects.count(), stored_originals(data_dir)

    response = upload(api, subject, data, name=name)

    assert response.status_code == 400
    assert error(response)["code"] == "not_an_image"
    assert error(response)["message"].startswith(message)
    assert Asset.objects.count() == assets
    assert stored_originals(data_dir) == files


def test_it_refuses_an_upload_over_the_size_limit_and_stores_nothing(
    api, subject, data_dir, settings
):
    settings.AVATARS_MAX_IMAGE_BYTES = 1024 * 1024
    files = stored_originals(data_dir)

    response = upload(api, subject, b"\x89PNG" + b"\0" * (1024 * 1024))

    assert response.status_code == 400
    assert error(response) == {
        "code": "too_large",
        "message": "The file is too large (the limit is 1 MB).",
    }
    assert Asset.objects.count() == 1  # the subject's own reference only
    assert stored_originals(data_dir) == files


def test_it_refuses_an_upload_with_too_many_pixels_and_stores_nothing(
    api, subject, data_dir, settings
):
    settings.AVATARS_MAX_IMAGE_PIXELS = 1000
    files = stored_originals(data_dir)

    response = upload(api, subject, png_bytes(11))

    assert response.status_code == 400
    assert error(response) == {
        "code": "not_an_image",
        "message": "The image has too many pixels (64 x 48).",
    }
    assert Asset.objects.count() == 1
    assert stored_originals(data_dir) == files


def test_it_refuses_an_upload_without_a_file_field(api, subject):
    file = SimpleUploadedFile("ada.png", png_bytes(12), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"photo": file})

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_upload",
        "message": "Send the photo as the multipart field `file`.",
    }
    assert Asset.objects.count() == 1


def test_it_refuses_a_json_body_where_an_upload_is_expected(api, subject):
    response = post_json(api, f"{API}/subjects/{subject.pk}/references", {"file": "ada.png"})

    assert response.status_code == 400
    assert error(response)["code"] == "invalid_upload"


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
    assert body["request"]["subjects"] == [subject.pk]
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


def test_it_cancels_a_batch_and_reports_the_cancelled_and_the_kept(api, subject):
    batch = a_batch(subject, candidates=3)
    queued, preparing, running = batch.tasks.order_by("ordinal")
    move(preparing, TaskState.PREPARING, phase="Checking reference photos")
    move(running, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    response = api.post(f"{API}/batches/{batch.pk}/cancel")

    assert response.status_code == 200
    body = response.json()
    assert sorted(body["cancelled"]) == sorted([str(queued.pk), str(preparing.pk)])
    assert body["kept"] == [str(running.pk)]
    assert dict(batch.tasks.values_list("pk", "state")) == {
        queued.pk: TaskState.CANCELLED,
        preparing.pk: TaskState.CANCELLED,
        running.pk: TaskState.RUNNING,
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
            "Unknown provider: 'midjourney'.",
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
            "Unknown model for provider 'openai': 'model-0'. Its models are gpt-image-1.",
        ),
        (lambda s: batch_request(s, references=[999_999]), "Unknown reference photo: 999999."),
        (
            lambda s: batch_request(s, frames=["portrait"]),
            "Unknown frame: 'portrait'. Frames are image, headshot, full-body, clip.",
        ),
        (lambda s: ["a list, not a batch"], "The request body must be a JSON object."),
        (lambda s: '{"prompt": "a portrait", ', "The request body is not valid JSON."),
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


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"providers": [{"provider": ["openai"]}]}, "Unknown provider: ['openai']."),
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


def test_it_refuses_one_provider_split_past_eight_candidates_with_400(api, subject):
    providers = [
        {"provider": "flux", "model": "flux-dev", "candidates": 4},
        {"provider": "flux", "model": "flux-pro", "candidates": 5},
    ]

    response = post_json(api, f"{API}/batches", batch_request(subject, providers=providers))

    assert response.status_code == 400
    assert error(response)["message"] == (
        "Provider 'flux' has 9 candidates across its rows; the limit is 8 per provider."
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
        "this batch would make 8 more and the daily limit is 20.",
    }, "16 + 8 > 20"
    assert Task.objects.count() == 16


def test_it_refuses_a_body_too_large_to_read_with_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = post_json(api, f"{API}/subjects", {"name": "Ada", "notes": "x" * 2000})

    assert response.status_code == 413
    assert error(response)["code"] == "too_large"
    assert not Subject.objects.exists()


# --- idempotency keys -------------------------------------------------------------


def post_keyed(client: Client, body: object, key: str) -> Any:
    return client.post(
        f"{API}/batches",
        json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def test_it_answers_a_repeated_idempotency_key_with_the_first_batch_and_plans_nothing(
    api, subject, ember
):
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": 2}])
    first = post_keyed(api, request, "spring-2026-retry-1")

    again = post_keyed(api, request, "spring-2026-retry-1")

    assert (first.status_code, again.status_code) == (202, 202)
    batch = Batch.objects.get()
    assert again["Location"] == first["Location"] == f"{API}/batches/{batch.pk}"
    assert again.json() == first.json()
    assert Task.objects.count() == 2
    assert len(ember.calls) == 0


def test_it_takes_the_same_body_with_its_fields_in_another_order_as_the_same_request(api, subject):
    request = batch_request(subject)
    first = post_keyed(api, request, "k-1")

    again = post_keyed(api, dict(reversed(list(request.items()))), "k-1")

    assert again.status_code == 202
    assert again["Location"] == first["Location"]
    assert Batch.objects.count() == 1


def test_it_refuses_an_idempotency_key_reused_with_a_different_body_and_plans_nothing(api, subject):
    first = post_keyed(api, batch_request(subject), "k-1")

    other = post_keyed(api, batch_request(subject, prompt="a different portrait"), "k-1")

    assert other.status_code == 422
    assert error(other) == {
        "code": "idempotency_key_reused",
        "message": "This Idempotency-Key was already used with a different request body; "
        "send a new key to plan another batch.",
    }
    assert [str(b.pk) for b in Batch.objects.all()] == [first.json()["id"]]
    assert Task.objects.count() == 1


def test_it_keeps_each_users_idempotency_keys_apart(api, subject):
    other = bearing(issue_token(user=User.objects.create_user("other-script")))
    first = post_keyed(api, batch_request(subject), "k-1")

    theirs = post_keyed(other, batch_request(subject), "k-1")

    assert theirs.status_code == 202
    assert theirs["Location"] != first["Location"]
    assert Batch.objects.count() == 2
    assert {b.created_by.username for b in Batch.objects.all()} == {"family-script", "other-script"}


def test_it_forgets_an_idempotency_key_after_24_hours(api, subject, monkeypatch):
    first = post_keyed(api, batch_request(subject), "k-1")
    later = timezone.now() + timedelta(hours=24, minutes=1)
    monkeypatch.setattr(timezone, "now", lambda: later)

    again = post_keyed(api, batch_request(subject), "k-1")
    once_more = post_keyed(api, batch_request(subject), "k-1")

    assert again.status_code == 202
    assert again["Location"] != first["Location"]
    assert once_more["Location"] == again["Location"]  # remembered again, from now on
    assert Batch.objects.count() == 2


def test_it_still_remembers_an_idempotency_key_just_inside_24_hours(api, subject, monkeypatch):
    first = post_keyed(api, batch_request(subject), "k-1")
    later = timezone.now() + timedelta(hours=23, minutes=59)
    monkeypatch.setattr(timezone, "now", lambda: later)

    again = post_keyed(api, batch_request(subject), "k-1")

    assert again["Location"] == first["Location"]
    assert Batch.objects.count() == 1


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * 201, "The Idempotency-Key must be at most 200 characters."),
        ("", "The Idempotency-Key must not be empty."),
    ],
    ids=["too-long", "empty"],
)
def test_it_refuses_an_unusable_idempotency_key_and_plans_nothing(api, subject, key, message):
    response = post_keyed(api, batch_request(subject), key)

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_idempotency_key", "message": message}
    assert not Batch.objects.exists()


def test_it_accepts_an_idempotency_key_of_200_characters(api, subject):
    key = "k" * 200
    first = post_keyed(api, batch_request(subject), key)

    again = post_keyed(api, batch_request(subject), key)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again["Location"] == first["Location"]


def test_it_records_no_key_for_a_refused_batch(api, subject):
    refused = post_keyed(api, batch_request(subject, prompt=" "), "k-1")

    accepted = post_keyed(api, batch_request(subject), "k-1")

    assert refused.status_code == 400
    assert accepted.status_code == 202
    assert Batch.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_plans_one_batch_for_two_concurrent_requests_with_the_same_key(subject, monkeypatch):
    token = issue_token(user=User.objects.create_user("family-script"))
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": 3}])
    # Both requests have looked for the key (and found none) before either plans:
    # the race the unique (user, key) constraint must settle.
    both_checked = threading.Barrier(2, timeout=10)
    validate = planning.validate

    def validate_in_step(body: Any) -> Any:
        both_checked.wait()
        return validate(body)

    monkeypatch.setattr(planning, "validate", validate_in_step)
    answers: list[Any] = []

    def post() -> None:
        try:
            answers.append(post_keyed(bearing(token), request, "double-click"))
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert [a.status_code for a in answers] == [202, 202]
    batch = Batch.objects.get()
    assert {a["Location"] for a in answers} == {f"{API}/batches/{batch.pk}"}
    assert answers[0].json()["id"] == answers[1].json()["id"] == str(batch.pk)
    assert Task.objects.count() == 3


# --- tasks ----------------------------------------------------------------------


def test_it_shows_a_task(api, subject):
    task = a_batch(subject).tasks.get()

    response = api.get(f"{API}/tasks/{task.pk}")

    assert response.status_code == 200
    assert response.json() == {
        "id": str(task.pk),
        "batch": str(task.batch_id),
        "kind": "image",
        "state": "queued",
        "phase": "Waiting for the worker",
        "error": "",
        "provider": "openai",
        "provider_label": "GPT Image",
        "model": "gpt-image-1",
        "frame": "image",
        "ordinal": 1,
        "ember_job_id": "",
        "attempts": 0,
        "protection_released": None,
        "asset": None,
    }


def test_it_shows_a_finished_task_with_its_asset(api, subject):
    task = a_batch(subject).tasks.get()
    asset = generated_asset(history_id="hist_1")
    move(task, TaskState.DONE, asset=asset, protection_released=True, phase="Complete")

    body = api.get(f"{API}/tasks/{task.pk}").json()

    assert (body["state"], body["asset"], body["protection_released"]) == (
        "done",
        str(asset.pk),
        True,
    )


def test_it_cancels_a_queued_task(api, subject):
    task = a_batch(subject).tasks.get()

    response = api.post(f"{API}/tasks/{task.pk}/cancel")

    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    assert response.json()["error"] == "Cancelled before anything was sent to Ember."
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED


def test_it_refuses_to_cancel_a_task_that_already_reached_ember(api, subject):
    task = a_batch(subject).tasks.get()
    move(task, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    response = api.post(f"{API}/tasks/{task.pk}/cancel")

    assert response.status_code == 409
    assert error(response) == {"code": "too_late", "message": TOO_LATE}
    assert Task.objects.get(pk=task.pk).state == TaskState.RUNNING


def test_it_refuses_to_cancel_a_clip_whose_send_may_have_reached_ember(api, subject):
    task = a_clip_sent_once(subject)

    response = api.post(f"{API}/tasks/{task.pk}/cancel")

    assert response.status_code == 409
    assert error(response) == {"code": "too_late", "message": TOO_LATE}
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED


def test_it_lets_staff_reconcile_a_task_with_embers_history(staff_api, subject, ember):
    task = uncertain(a_task(subject))
    route = history_route(ember, task)

    response = staff_api.post(f"{API}/tasks/{task.pk}/reconcile")

    assert response.status_code == 200
    assert route.call_count == 1
    body = response.json()
    assert (body["state"], body["ember_job_id"], body["attempts"]) == ("copying", "job_7", 1)
    assert Task.objects.get(pk=task.pk).state == TaskState.COPYING


RECONCILE_FORBIDDEN = {
    "code": "forbidden",
    "message": "Reconciling a task needs the permission to change tasks (studio.change_task).",
}


@pytest.mark.parametrize("is_staff", [False, True], ids=["plain user", "staff"])
def test_it_refuses_reconcile_to_anyone_without_the_change_task_permission(
    subject, ember, is_staff
):
    client = bearing(issue_token(user=User.objects.create_user("viewer", is_staff=is_staff)))
    task = uncertain(a_task(subject))
    route = history_route(ember, task)

    response = client.post(f"{API}/tasks/{task.pk}/reconcile")

    assert response.status_code == 403
    assert error(response) == RECONCILE_FORBIDDEN
    assert route.call_count == 0
    assert Task.objects.get(pk=task.pk).state == TaskState.UNCERTAIN


def test_it_lets_a_user_allowed_to_change_tasks_reconcile_without_being_staff(subject, ember):
    # The admin also needs staff status, to enter the admin site; the API needs only this.
    script = allowed_to_change_tasks(User.objects.create_user("repair-script"))
    task = uncertain(a_task(subject))
    route = history_route(ember, task)

    response = bearing(issue_token(user=script)).post(f"{API}/tasks/{task.pk}/reconcile")

    assert response.status_code == 200
    assert route.call_count == 1
    assert Task.objects.get(pk=task.pk).state == TaskState.COPYING


def test_it_answers_409_when_the_worker_moves_a_task_during_its_reconcile(
    staff_api, subject, monkeypatch
):
    task = uncertain(a_task(subject))

    def worker_won_the_race(*, task: Task) -> Task:
        raise Conflict(f"Task {task.pk} moved past version {task.version}")

    monkeypatch.setattr(engine, "reconcile", worker_won_the_race)

    response = staff_api.post(f"{API}/tasks/{task.pk}/reconcile")

    assert response.status_code == 409
    assert error(response) == {
        "code": "conflict",
        "message": "The row changed while this request was served; read it again and retry.",
    }


# --- assets ---------------------------------------------------------------------


def test_it_shows_an_asset(api, subject):
    asset = subject.assets.get()

    response = api.get(f"{API}/assets/{asset.pk}")

    assert response.status_code == 200
    assert response.json() == {
        "id": str(asset.pk),
        "sha256": asset.sha256,
        "mime": "image/png",
        "width": 64,
        "height": 48,
        "size": asset.size,
        "label": "",
        "origin": "uploaded",
        "subjects": [str(subject.pk)],
        "task": None,
        "batch": None,
        "provider": "",
        "model": "",
        "ember_image_id": "",
        "ember_history_id": "",
        "created_at": asset.created_at.isoformat(),
        "url": f"{API}/assets/{asset.pk}/original",
    }


def test_it_serves_an_original_with_its_type_hash_and_caching(api, make_subject, make_reference):
    data = jpeg_bytes()
    asset = make_reference(make_subject("Ada"), data)

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 200
    assert response.content == data
    assert response["Content-Type"] == "image/jpeg"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'


def test_it_answers_503_rather_than_serve_an_original_that_fails_its_checksum(api, subject):
    asset = subject.assets.get()
    originals.path_for(asset.sha256, ".png").write_bytes(png_bytes(99))

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response) == {
        "code": "checksum_failed",
        "message": "Stored original failed its checksum.",
    }


def test_it_answers_503_when_an_original_is_missing_from_the_store(api, subject):
    asset = subject.assets.get()
    originals.path_for(asset.sha256, ".png").unlink()

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response)["code"] == "original_missing"


# --- sets -----------------------------------------------------------------------


def test_it_creates_a_set_in_the_order_given(api, make_subject, make_reference):
    ada = make_subject("Ada")
    first, second, third = make_reference(ada), make_reference(ada), generated_asset()

    response = post_json(
        api, f"{API}/sets", {"name": "Family 2026", "assets": [third.pk, first.pk, second.pk]}
    )

    assert response.status_code == 201
    chosen = AvatarSet.objects.get()
    assert response.json() == {
        "id": str(chosen.pk),
        "name": "Family 2026",
        "published_at": None,
        "assets": [
            {
                "id": str(a.pk),
                "sha256": a.sha256,
                "mime": "image/png",
                "url": f"{API}/assets/{a.pk}/original",
            }
            for a in (third, first, second)
        ],
    }


@pytest.mark.parametrize(
    ("make_body", "message"),
    [
        (lambda a: {"name": "Family", "assets": [a.pk, 999_999]}, "Unknown asset: 999999."),
        (lambda a: {"name": "  ", "assets": [a.pk]}, "A set needs a name."),
        (lambda a: {"name": "Family"}, "Assets must be a list of ids."),
    ],
    ids=["unknown-asset", "no-name", "no-assets"],
)
def test_it_refuses_a_bad_set_and_creates_none(api, subject, make_body, message):
    response = post_json(api, f"{API}/sets", make_body(subject.assets.get()))

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_request", "message": message}
    assert not AvatarSet.objects.exists()
    assert not SetItem.objects.exists()


def test_it_shows_a_set_with_its_assets_in_order(api, subject):
    reference = subject.assets.get()
    candidate = generated_asset(history_id="hist_1")
    chosen = a_set(candidate, reference)

    response = api.get(f"{API}/sets/{chosen.pk}")

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["name"], body["published_at"]) == (str(chosen.pk), "Family 2026", None)
    assert [(a["id"], a["sha256"], a["url"]) for a in body["assets"]] == [
        (str(a.pk), a.sha256, f"{API}/assets/{a.pk}/original") for a in (candidate, reference)
    ]


def test_it_publishes_a_set_whose_generated_images_have_their_history(api, subject):
    chosen = a_set(subject.assets.get(), generated_asset(history_id="hist_1"))

    response = api.post(f"{API}/sets/{chosen.pk}/publish")

    assert response.status_code == 200
    published_at = AvatarSet.objects.get(pk=chosen.pk).published_at
    assert published_at is not None
    assert response.json()["published_at"] == published_at.isoformat()


def test_it_refuses_to_publish_a_set_with_missing_ember_history(api, subject):
    chosen = a_set(generated_asset(history_id="hist_1"), generated_asset(history_id=""))

    response = api.post(f"{API}/sets/{chosen.pk}/publish")

    assert response.status_code == 409
    assert error(response) == {"code": "publish_refused", "message": PUBLISH_REFUSED}
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None


# --- unknown ids, methods and paths ---------------------------------------------

UNKNOWN_IDS = ["999999", "not-a-number", "99999999999999999999999999"]
UNKNOWN_UUIDS = ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "1234"]


@pytest.mark.parametrize(
    ("method", "route", "ids"),
    [
        ("post", "subjects/{}/references", UNKNOWN_IDS),
        ("get", "batches/{}", UNKNOWN_UUIDS),
        ("post", "batches/{}/cancel", UNKNOWN_UUIDS),
        ("get", "tasks/{}", UNKNOWN_UUIDS),
        ("post", "tasks/{}/cancel", UNKNOWN_UUIDS),
        ("get", "assets/{}", UNKNOWN_IDS),
        ("get", "assets/{}/original", UNKNOWN_IDS),
        ("get", "sets/{}", UNKNOWN_IDS),
        ("post", "sets/{}/publish", UNKNOWN_IDS),
    ],
)
def test_it_answers_404_for_an_unknown_or_malformed_id(api, method, route, ids):
    for unknown in ids:
        response = getattr(api, method)(f"{API}/{route.format(unknown)}")

        assert response.status_code == 404, unknown
        assert error(response)["code"] == "not_found"


def test_it_answers_404_for_reconciling_an_unknown_task_as_staff(staff_api):
    response = staff_api.post(f"{API}/tasks/not-a-uuid/reconcile")

    assert response.status_code == 404


def test_it_answers_a_path_it_does_not_have_with_a_json_404(api):
    response = api.get(f"{API}/avatars")

    assert response.status_code == 404
    assert error(response) == {"code": "not_found", "message": "The API has no such route."}


@pytest.mark.parametrize(
    ("method", "route", "allowed"),
    [
        ("delete", "subjects", "GET, POST"),
        ("get", "subjects/{subject}/references", "POST"),
        ("get", "batches", "POST"),
        ("post", "batches/{batch}", "GET"),
        ("get", "batches/{batch}/cancel", "POST"),
        ("delete", "tasks/{task}", "GET"),
        ("get", "tasks/{task}/cancel", "POST"),
        ("get", "tasks/{task}/reconcile", "POST"),
        ("post", "assets/{asset}", "GET"),
        ("put", "assets/{asset}/original", "GET"),
        ("get", "sets", "POST"),
        ("patch", "sets/{set}", "GET"),
        ("get", "sets/{set}/publish", "POST"),
    ],
)
def test_it_answers_405_for_a_method_a_route_does_not_take(api, subject, method, route, allowed):
    task = a_batch(subject).tasks.get()
    chosen = a_set(subject.assets.get())
    url = route.format(
        subject=subject.pk,
        batch=task.batch_id,
        task=task.pk,
        asset=chosen.items.get().asset_id,
        set=chosen.pk,
    )

    response = getattr(api, method)(f"{API}/{url}")

    assert response.status_code == 405
    assert response["Allow"] == allowed
    assert error(response)["code"] == "method_not_allowed"
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    assert AvatarSet.objects.get(pk=chosen.pk).published_at is None
