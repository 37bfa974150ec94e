"""The JSON API answers unknown ids, paths and methods with a JSON error (docs/api.md)."""

import pytest
from django.test import Client

from studio.models import (
    AvatarSet,
    Task,
    TaskState,
)
from tests.api.calls import API, error
from tests.factories import (
    a_batch,
    a_set,
)
from tests.studio_pages import served_bytes

pytestmark = pytest.mark.django_db


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


@pytest.mark.parametrize("path", ["/api/v2/subjects", "/api/", "/api/v1x/batches"])
def test_it_answers_a_path_under_api_outside_its_version_with_a_json_404(path):
    """Found by a review over uvicorn: /api/v2/subjects answered Django's HTML page."""
    response = Client().get(path)

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert error(response) == {"code": "not_found", "message": "The API has no such route."}


def test_a_studio_path_nothing_serves_still_answers_the_studios_page():
    response = Client().get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


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


# --- HEAD -----------------------------------------------------------------------

READABLE = ["subjects", "batches/{batch}", "tasks/{task}", "assets/{asset}", "sets/{set}"]


@pytest.mark.parametrize("route", [*READABLE, "assets/{asset}/original", "openapi.json"])
def test_it_answers_head_as_it_answers_get_without_the_body(api, subject, route):
    task = a_batch(subject).tasks.get()
    chosen = a_set(subject.assets.get())
    url = f"{API}/" + route.format(
        batch=task.batch_id, task=task.pk, asset=chosen.items.get().asset_id, set=chosen.pk
    )
    got = api.get(url)

    response = api.head(url)

    assert response.status_code == 200
    assert response.content == b""
    assert response["Content-Type"] == got["Content-Type"]
    assert response["Content-Length"] == str(len(served_bytes(got)))


def test_it_still_answers_head_without_a_token_with_401(db):
    response = Client().head(f"{API}/subjects")

    assert response.status_code == 401


def test_it_answers_head_on_a_route_that_only_writes_with_405(api):
    response = api.head(f"{API}/batches")

    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_a_query_of_too_many_fields_is_said_to_be_the_querys_fault(api):
    query = "&".join(f"f{i}=1" for i in range(1001))

    response = api.get(f"{API}/subjects?{query}")

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_request",
        "message": "The query has more than 1000 fields; send fewer.",
    }
