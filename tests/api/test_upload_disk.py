"""An upload the disk will not take (full, read-only): a clear refusal, nothing kept.

Found by a review on a full disk: the API answered 500 `internal_error` and the studio
"Something went wrong", with nothing telling the person or the operator why.
"""

import errno

import psycopg
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import OperationalError

from studio import originals
from studio.engine import library
from studio.models import Asset
from tests.api.calls import API
from tests.factories import png_bytes
from tests.sqlite_errors import sqlite_error

pytestmark = pytest.mark.django_db

REFUSED = (
    "The photo was not kept: the disk Avatars stores photos on refused it ({cause}). Try "
    "again once an operator has seen to that disk."
)
# Found by a review on a full database disk: the photos' disk, with room, was blamed.
REFUSED_ROW = (
    "The photo was not kept: the disk Avatars keeps its database on refused it ({cause}). "
    "Try again once an operator has seen to that disk."
)


def the_disk_refuses(monkeypatch, number: int, cause: str) -> None:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise OSError(number, cause)

    monkeypatch.setattr(originals, "write_temp", refused)


@pytest.mark.parametrize(
    ("number", "cause"),
    [(errno.ENOSPC, "No space left on device"), (errno.EROFS, "Read-only file system")],
)
def test_the_api_says_the_disk_refused_an_upload(api, make_subject, monkeypatch, number, cause):
    subject = make_subject()
    the_disk_refuses(monkeypatch, number, cause)
    photo = SimpleUploadedFile("ada.png", png_bytes(3), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert response.status_code == 503
    assert response.json() == {
        "error": {"code": "storage_refused", "message": REFUSED.format(cause=cause)}
    }
    assert not Asset.objects.exists()


def test_the_studio_says_the_disk_refused_an_upload(signed_in, make_subject, monkeypatch):
    subject = make_subject()
    the_disk_refuses(monkeypatch, errno.ENOSPC, "No space left on device")
    photo = SimpleUploadedFile("ada.png", png_bytes(4), content_type="image/png")

    response = signed_in.post(f"/subjects/{subject.pk}/", {"photo": photo})

    assert response.status_code == 400  # the form again, with the reason on it
    assert REFUSED.format(cause="No space left on device") in response.content.decode()
    assert not Asset.objects.exists()


def the_database_fails(monkeypatch, exc: BaseException) -> None:
    def fails(*_args: object) -> None:
        raise exc

    monkeypatch.setattr(library, "_stored_reference", fails)


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_database_whose_disk_refuses_the_row_is_said_as_such(
    api, make_subject, monkeypatch, tmp_path, how
):
    """By SQLite's result code, not its message's words (which once decided it)."""
    subject = make_subject()
    exc = sqlite_error(tmp_path, how)
    the_database_fails(monkeypatch, exc)
    photo = SimpleUploadedFile("ada.png", png_bytes(5), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert response.status_code == 503
    assert response.json()["error"] == {
        "code": "storage_refused",
        "message": REFUSED_ROW.format(cause=str(exc)),
    }


def test_postgresql_out_of_disk_is_said_as_such(api, make_subject, monkeypatch):
    subject = make_subject()
    full = OperationalError("could not extend file")
    full.__cause__ = psycopg.errors.DiskFull("could not extend file")
    the_database_fails(monkeypatch, full)
    photo = SimpleUploadedFile("ada.png", png_bytes(6), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert response.status_code == 503
    assert response.json()["error"] == {
        "code": "storage_refused",
        "message": REFUSED_ROW.format(cause="could not extend file"),
    }


def test_a_busy_database_is_no_refusing_disk(api, make_subject, monkeypatch, tmp_path):
    """A database locked past its wait is out of reach for now: no words about a disk."""
    api.raise_request_exception = False  # answered as deployed, by the error pages
    subject = make_subject()
    the_database_fails(monkeypatch, sqlite_error(tmp_path, "locked"))
    photo = SimpleUploadedFile("ada.png", png_bytes(7), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert (response.status_code, response.json()["error"]["code"]) == (
        503,
        "database_unavailable",
    ), response.content


def test_words_alone_do_not_make_a_refusing_disk(api, make_subject, monkeypatch):
    """An error with no database code under it is a bug's, whatever its words say."""
    api.raise_request_exception = False  # answered as deployed, by the error pages
    subject = make_subject()
    the_database_fails(monkeypatch, OperationalError("database or disk is full"))
    photo = SimpleUploadedFile("ada.png", png_bytes(8), content_type="image/png")

    response = api.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert (response.status_code, response.json()["error"]["code"]) == (500, "internal_error")
