"""What a signed-in person is shown is theirs: no browser history or proxy keeps a copy.

After signing out, Back must not show the studio's pages again from the browser's cache,
and a shared proxy must not keep them; the pictures, named by their hash, stay cached.
"""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from studio import engine
from studio.api.auth import issue_token
from tests.api.calls import bearing
from tests.factories import a_batch

pytestmark = pytest.mark.django_db

NEVER_CACHED = "max-age=0, no-cache, no-store, must-revalidate, private"  # as the sign-in page's
IMMUTABLE = "private, max-age=31536000, immutable"


@pytest.fixture
def addresses(subject) -> dict[str, str]:
    batch = a_batch(subject)
    photo = subject.assets.get()
    chosen = engine.create_set(name="Family 2026", asset_ids=[photo.pk])
    return {
        "home": "/",
        "subjects": "/subjects/",
        "subject": f"/subjects/{subject.pk}/",
        "new batch": "/batches/new/",
        "batch": f"/batches/{batch.pk}/",
        "progress": f"/batches/{batch.pk}/progress/",
        "results": f"/batches/{batch.pk}/results/",
        "gallery": "/gallery/",
        "sets": "/sets/",
        "set": f"/sets/{chosen.pk}/",
        "asset": f"/assets/{photo.pk}/",
        "missing page": "/batches/00000000-0000-4000-8000-000000000000/",
        "thumbnail": f"/assets/{photo.pk}/thumb/256/v3/",
        "original": f"/assets/{photo.pk}/original/",
    }


PAGES = [
    "home",
    "subjects",
    "subject",
    "new batch",
    "batch",
    "progress",
    "results",
    "gallery",
    "sets",
    "set",
    "asset",
    "missing page",
]


@pytest.mark.parametrize("page", PAGES)
def test_it_tells_browsers_and_proxies_to_keep_no_copy_of_a_signed_in_page(
    signed_in: Client, addresses, page
):
    response = signed_in.get(addresses[page], headers={"HX-Request": "true"})

    assert response.status_code in (200, 404), response.status_code
    assert response["Cache-Control"] == NEVER_CACHED


@pytest.mark.parametrize("page", ["thumbnail", "original"])
def test_it_still_lets_a_browser_keep_the_pictures(signed_in: Client, addresses, page):
    response = signed_in.get(addresses[page])

    assert response.status_code == 200
    assert response["Cache-Control"] == IMMUTABLE


def test_it_tells_proxies_to_keep_no_copy_of_an_api_answer_to_a_token(addresses):
    client = bearing(issue_token(user=User.objects.create_user("family-script")))

    listed = client.get("/api/v1/subjects")
    original = client.get(f"/api/v1{addresses['original'].removesuffix('/')}")

    assert listed["Cache-Control"] == NEVER_CACHED
    assert original["Cache-Control"] == IMMUTABLE
