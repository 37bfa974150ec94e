"""The JSON API's assets, their originals, and sets and publishing them (docs/api.md)."""

import hashlib

import pytest

from studio import originals
from studio.models import (
    AvatarSet,
    SetItem,
)
from tests.api.calls import API, error, generated_asset, jpeg_bytes, post_json
from tests.factories import (
    a_set,
    kept_image,
    png_bytes,
)
from tests.studio_pages import served_bytes

pytestmark = pytest.mark.django_db


PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."


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
    assert served_bytes(response) == data
    assert response["Content-Type"] == "image/jpeg"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, max-age=31536000, immutable"
    assert response["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'


def test_a_client_holding_the_original_gets_304_without_the_bytes(
    api, make_subject, make_reference
):
    """Found by a review: the API sent 9 MB again where the studio's route answered 304."""
    data = jpeg_bytes()
    asset = make_reference(make_subject("Ada"), data)
    etag = f'"{hashlib.sha256(data).hexdigest()}"'

    again = api.get(f"{API}/assets/{asset.pk}/original", HTTP_IF_NONE_MATCH=etag)
    other = api.get(f"{API}/assets/{asset.pk}/original", HTTP_IF_NONE_MATCH='"another"')

    assert (again.status_code, again.content, again["ETag"]) == (304, b"", etag)
    assert other.status_code == 200 and served_bytes(other) == data
    # "*": any version held (RFC 9110 13.1.2); an original never changes under its name.
    held = api.get(f"{API}/assets/{asset.pk}/original", HTTP_IF_NONE_MATCH="*")
    assert (held.status_code, held.content) == (304, b"")


def test_it_answers_503_for_an_original_that_is_only_a_link_to_its_bytes(api, subject, tmp_path):
    # The store holds no original behind a link (check_originals calls it corrupt): served,
    # it would look whole to a client while the archive may lose it any day.
    asset = subject.assets.get()
    path = originals.path_for(asset.sha256, ".png")
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(elsewhere)

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response)["code"] == "checksum_failed"


def test_it_answers_503_rather_than_serve_an_original_that_fails_its_checksum(api, subject):
    asset = subject.assets.get()
    originals.path_for(asset.sha256, ".png").write_bytes(png_bytes(99))

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response) == {
        "code": "checksum_failed",
        "message": "Stored original failed its checksum.",
    }


@pytest.mark.parametrize("damage", ["a folder", "past the cap"])
def test_it_answers_503_for_something_else_in_an_originals_place(api, subject, settings, damage):
    """Found by a review: a folder where the file should be answered a bare 500."""
    asset = subject.assets.get()
    path = originals.path_for(asset.sha256, ".png")
    if damage == "a folder":
        path.unlink()
        path.mkdir()
    else:
        settings.AVATARS_MAX_IMAGE_BYTES = asset.size - 1

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response)["message"] == "Stored original failed its checksum."


def test_it_answers_503_when_an_original_is_missing_from_the_store(api, subject):
    asset = subject.assets.get()
    originals.path_for(asset.sha256, ".png").unlink()

    response = api.get(f"{API}/assets/{asset.pk}/original")

    assert response.status_code == 503
    assert error(response)["code"] == "original_missing"


# --- sets -----------------------------------------------------------------------


def test_it_refuses_a_set_of_more_assets_than_it_looks_up_with_a_400(api):
    """Found by a review: 250,001 ids were a 500 (too many SQL variables)."""
    response = post_json(api, f"{API}/sets", {"name": "many", "assets": list(range(1, 300_002))})

    assert response.status_code == 400
    assert error(response)["message"] == "Assets may name at most 1000 ids, not 300001."
    assert not AvatarSet.objects.exists()


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
        # Once cut to 120 characters without a word (a subject's name was refused).
        (
            lambda a: {"name": "n" * 121, "assets": [a.pk]},
            "A set's name must be at most 120 characters.",
        ),
    ],
    ids=["unknown-asset", "no-name", "no-assets", "long-name"],
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
    chosen = a_set(subject.assets.get(), kept_image(history_id="hist_1"))

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


def test_it_refuses_to_publish_a_set_that_holds_nothing(api, subject):
    empty = a_set()

    response = api.post(f"{API}/sets/{empty.pk}/publish")

    assert response.status_code == 409
    assert error(response) == {
        "code": "publish_refused",
        "message": "Publishing waits until the set holds at least one image.",
    }
    assert AvatarSet.objects.get(pk=empty.pk).published_at is None
