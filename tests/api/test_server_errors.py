"""An error of the server's own under the API is a JSON 500 in the API's shape, and logged.

With DEBUG off, as deployed: with it on, Django shows its debugging page instead. The same
over uvicorn: tests/e2e/test_api_live.py.
"""

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from avatars.bodylimit import BodyLimit
from studio import sending
from studio.api.auth import issue_token
from tests.api.calls import API, error
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db

INTERNAL = {
    "code": "internal_error",
    "message": "The server hit an error of its own and could not answer; it has been logged.",
}


@pytest.fixture
def deployed(settings) -> Client:
    """A script's client of a server with DEBUG off, seeing its 500s as a real one would."""
    settings.DEBUG = False
    token = issue_token(user=User.objects.create_user("family-script"))
    return Client(raise_request_exception=False, headers={"Authorization": f"Bearer {token}"})


def unusable_originals(data_dir) -> str:
    """Put a file where the originals' folder should be; return the path a 500 must not show."""
    folder = data_dir / "originals"
    for child in folder.rglob("*"):
        if child.is_file():
            child.unlink()
    for child in sorted(folder.rglob("*"), reverse=True):
        child.rmdir()
    folder.rmdir()
    folder.write_bytes(b"not a folder")
    return str(folder)


def test_it_answers_an_upload_it_cannot_store_with_a_json_500_naming_no_path(
    deployed, subject, data_dir, caplog
):
    hidden = unusable_originals(data_dir)
    photo = SimpleUploadedFile("eve.png", png_bytes(5), content_type="image/png")

    response = deployed.post(f"{API}/subjects/{subject.pk}/references", {"file": photo})

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert error(response) == INTERNAL
    assert hidden not in response.content.decode()
    logged = [r for r in caplog.records if r.name == "django.request" and r.exc_info]
    assert logged, "the error was not logged with its traceback"


def test_it_answers_an_original_it_cannot_read_with_a_json_500(deployed, subject, monkeypatch):
    def broken(*args: object) -> bytes:
        raise PermissionError(13, "Permission denied", "/srv/avatars/data/originals/ab/cd.png")

    monkeypatch.setattr(sending, "open_checked", broken)

    response = deployed.get(f"{API}/assets/{subject.assets.get().pk}/original")

    assert response.status_code == 500
    assert error(response) == INTERNAL
    assert "/srv/avatars" not in response.content.decode()


def test_it_still_answers_a_studio_page_with_the_studios_own_500_page(
    settings, signed_in, monkeypatch
):
    settings.DEBUG = False
    browser = Client(raise_request_exception=False)
    browser.cookies = signed_in.cookies

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("studio.web.views.batches.render", broken)
    response = browser.get("/")

    assert response.status_code == 500
    assert "Something went wrong here" in response.content.decode()


def test_it_answers_an_api_request_that_fails_before_django_answers_with_a_json_500(caplog):
    """As when Django cannot spool a body to a full disk: uvicorn said "Internal Server Error"."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise OSError(28, "No space left on device", "/tmp/upload")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "method": "GET", "path": f"{API}/subjects", "headers": []}
    async_to_sync(BodyLimit(app))(scope, receive, send)

    assert sent[0]["status"] == 500
    assert json.loads(sent[1]["body"]) == {"error": INTERNAL}
    assert "/tmp" not in sent[1]["body"].decode()
    assert any(r.exc_info for r in caplog.records if r.name == "avatars.bodylimit")
