"""The JSON API's subjects and their reference photos (docs/api.md)."""

import base64
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.files import uploadedfile as uploaded_files
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from studio.models import (
    Asset,
    Origin,
    Subject,
)
from tests.api.calls import (
    API,
    error,
    jpeg_bytes,
    post_json,
)
from tests.factories import (
    png_bytes,
    stored_asset,
)
from tests.studio_pages import served_bytes

pytestmark = pytest.mark.django_db


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


def upload(client: Client, subject: Subject, data: bytes, name: str = "ada.png") -> Any:
    file = SimpleUploadedFile(name, data, content_type="image/png")
    return client.post(f"{API}/subjects/{subject.pk}/references", {"file": file})


def stored_originals(data_dir: Path) -> list[str]:
    directory = data_dir / "originals"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


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
        # Found by a review: a forged name no database can compare against was a 500.
        encoded(["\ud800", 1]),
        encoded(["\u0000", 1]),
    ],
)
def test_it_refuses_a_bad_cursor_with_a_400(api, make_subject, cursor):
    make_subject("Ada")

    response = api.get(f"{API}/subjects", {"cursor": cursor})

    assert response.status_code == 400
    assert error(response)["code"] == "invalid_cursor"


def test_an_empty_cursor_is_the_first_page(api, make_subject):
    """Found by a review's Schemathesis run: the document allows `?cursor=`, which was a 400."""
    make_subject("Ada")

    response = api.get(f"{API}/subjects", {"cursor": ""})

    assert response.status_code == 200, response.content
    assert [item["name"] for item in response.json()["items"]] == ["Ada"]


def first_cursor(api: Client) -> str:
    """Return the cursor of the second page, as the first page gives it out."""
    next_url = api.get(f"{API}/subjects").json()["next"]
    path, _, query = next_url.partition("?cursor=")
    assert path == f"{API}/subjects" and re.fullmatch(r"[A-Za-z0-9_.-]+", query), next_url
    return query  # URL-safe as it is: nothing in it needs escaping


def test_it_refuses_a_cursor_of_the_right_form_that_it_did_not_give_out(api, make_subject):
    """Found by a review: any base64 of `["<text>", <number>]` was taken as a cursor."""
    many_subjects(60)
    bo = make_subject("Bo")

    response = api.get(f"{API}/subjects", {"cursor": encoded(["Bo", bo.pk])})

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_cursor",
        "message": "The cursor is not one this API gave out; start again from the first page.",
    }


def test_it_refuses_a_cursor_it_gave_out_with_any_one_character_changed(api):
    many_subjects(60)
    cursor = first_cursor(api)
    assert api.get(f"{API}/subjects", {"cursor": cursor}).status_code == 200

    for at, was in enumerate(cursor):
        changed = cursor[:at] + ("B" if was == "A" else "A") + cursor[at + 1 :]
        response = api.get(f"{API}/subjects", {"cursor": changed})
        assert response.status_code == 400, (at, changed)
        assert error(response)["code"] == "invalid_cursor"


def test_it_pages_on_past_subjects_with_the_longest_names_in_any_script(api):
    """A cursor names the last subject seen: its name may be 120 characters of emoji."""
    names = [f"{chr(0x1F600 + n % 64) * 119}{n % 10}" for n in range(51)]
    Subject.objects.bulk_create(Subject(name=name, slug=f"s-{n}") for n, name in enumerate(names))

    first = api.get(f"{API}/subjects").json()
    second = api.get(first["next"])

    assert second.status_code == 200
    assert sorted(item["name"] for item in first["items"] + second.json()["items"]) == sorted(names)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "   "}, "A subject needs a name."),
        ({}, "A subject needs a name."),
        # Found by a review: an override, a zero-width space and a joiner were a name.
        ({"name": "\u202e\u200b\u200d"}, "A subject needs a name."),
        ({"name": "\u2067\u00a0\u0301\ufeff"}, "A subject needs a name."),
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
    assert served_bytes(response) == data


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


def test_a_photo_past_djangos_in_memory_size_is_stored_without_a_temporary_file(
    api, subject, data_dir, monkeypatch
):
    """Django writes files past 2.5 MB to a temporary file; this one stays in memory."""
    noise = Image.effect_noise((1400, 1000), 60).convert("RGB")
    out = io.BytesIO()
    noise.save(out, "PNG")
    data = out.getvalue()
    assert len(data) > django_settings.FILE_UPLOAD_MAX_MEMORY_SIZE, f"only {len(data):,} bytes"
    named: list[dict[str, Any]] = []
    real = uploaded_files.tempfile.NamedTemporaryFile  # django.core.files.temp

    def spy(*args: Any, **kwargs: Any) -> Any:
        named.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(uploaded_files.tempfile, "NamedTemporaryFile", spy)

    response = upload(api, subject, data, name="noise.png")

    assert response.status_code == 201, response.content
    assert named == [], f"{len(named)} temporary file(s) made for a {len(data):,}-byte upload"
    stored = data_dir / "originals" / f"{hashlib.sha256(data).hexdigest()}.png"
    assert stored.read_bytes() == data


def test_it_refuses_an_upload_with_too_many_pixels_and_stores_nothing(
    api, subject, data_dir, settings
):
    settings.AVATARS_MAX_IMAGE_PIXELS = 1000
    files = stored_originals(data_dir)

    response = upload(api, subject, png_bytes(11))

    assert response.status_code == 400
    assert error(response) == {
        "code": "not_an_image",
        "message": "The image has too many pixels (64 x 48); at most 1,000 are accepted.",
    }
    assert Asset.objects.count() == 1
    assert stored_originals(data_dir) == files


def test_it_refuses_an_upload_without_a_file_field(api, subject):
    file = SimpleUploadedFile("ada.png", png_bytes(12), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"photo": file})

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_upload",
        "message": "Send the photo as the multipart field `file`, under a file name (such as "
        "photo.jpg).",
    }
    assert Asset.objects.count() == 1


def test_it_says_a_file_name_too_long_to_read_is_the_trouble(api, subject, data_dir):
    files = stored_originals(data_dir)
    # Django's test client keeps 255 characters of a name; a script may send any.
    name = "a" * 10_000 + ".png"
    body = (
        b"--cut\r\n"
        + f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'.encode()
        + b"Content-Type: image/png\r\n\r\n"
        + png_bytes(13)
        + b"\r\n--cut--\r\n"
    )

    response = api.generic(
        "POST",
        f"{API}/subjects/{subject.pk}/references",
        body,
        content_type="multipart/form-data; boundary=cut",
    )

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_upload",
        "message": "The upload's part headers are longer than 1,024 bytes: shorten the file "
        "name (names are kept to 255 characters).",
    }
    assert Asset.objects.count() == 1
    assert stored_originals(data_dir) == files


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (
            b"".join(
                f'--cut\r\nContent-Disposition: form-data; name="f{i}"\r\n\r\nx\r\n'.encode()
                for i in range(5_000)
            ),
            "The upload has more than 1,000 fields: send one photo, as `file`.",
        ),
        (
            b"".join(
                b'--cut\r\nContent-Disposition: form-data; name="file"; filename="p.png"\r\n'
                b"Content-Type: image/png\r\n\r\nx\r\n"
                for _ in range(2)
            ),
            "The upload has more than one file: send one photo at a time, as `file`.",
        ),
    ],
    ids=["fields", "files"],
)
def test_it_says_an_upload_of_too_many_parts_has_too_many(api, subject, data_dir, parts, message):
    """A review's 50,000 fields were answered "not a valid multipart form", which it was."""
    files = stored_originals(data_dir)

    response = api.generic(
        "POST",
        f"{API}/subjects/{subject.pk}/references",
        parts + b"--cut--\r\n",
        content_type="multipart/form-data; boundary=cut",
    )

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_upload", "message": message}
    assert stored_originals(data_dir) == files


def test_it_keeps_255_characters_of_a_long_file_name_and_its_extension(api, subject):
    response = upload(api, subject, png_bytes(14), name="b" * 600 + ".png")

    assert response.status_code == 201
    assert Asset.objects.get(pk=response.json()["id"]).file_name == "b" * 251 + ".png"


def test_it_refuses_a_json_body_where_an_upload_is_expected(api, subject):
    response = post_json(api, f"{API}/subjects/{subject.pk}/references", {"file": "ada.png"})

    assert response.status_code == 400
    assert error(response)["code"] == "invalid_upload"
