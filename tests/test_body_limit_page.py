"""A studio upload past the body limit is answered with a page of the studio, not bare text.

The ASGI door (avatars/bodylimit.py) answers before Django reads the body; these drive it
directly with a fake application behind it. The same over uvicorn: tests/e2e/test_limits.py.
"""

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client

from avatars import upload_bodies
from avatars.bodylimit import BodyLimit

pytestmark = pytest.mark.django_db

HUGE = 300 * 1024 * 1024
SAID = "That photo is too large: the limit is 25 MB."


def knock(
    path: str, headers: dict[str, str], *, chunks: int = 0, upload: bool = True
) -> tuple[int, dict, str, int]:
    """Send a POST through the door; return its status, headers, body and chunks read.

    With `chunks`, the body streams (chunked) in pieces of 1 MiB and Django's stand-in
    reads until told the client went away; without, it announces `HUGE` bytes. The body
    is an upload (a multipart form) unless `upload` is false (a form's fields).
    """
    sent: list[dict[str, Any]] = []
    read: list[int] = []
    piece = b"\0" * (1024 * 1024)

    async def receive() -> dict[str, Any]:
        read.append(len(piece))
        return {"type": "http.request", "body": piece, "more_body": len(read) < chunks}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert chunks and not upload, "the body reached Django"
        while (await receive())["type"] != "http.disconnect":
            pass

    framing = {"transfer-encoding": "chunked"} if chunks else {"content-length": str(HUGE)}
    framing["content-type"] = (
        "multipart/form-data; boundary=x" if upload else "application/x-www-form-urlencoded"
    )
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in {**headers, **framing}.items()],
    }
    async_to_sync(BodyLimit(app))(scope, receive, send)
    start, body = sent[0], sent[1]["body"].decode()
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, len(read)


@pytest.fixture
def cookie(signed_in: Client) -> str:
    return f"{settings.SESSION_COOKIE_NAME}={signed_in.cookies[settings.SESSION_COOKIE_NAME].value}"


def test_it_answers_a_signed_in_upload_past_the_limit_with_a_page_leading_back(cookie):
    """Found by a review: the studio gave way to "The request body is too large …" as text."""
    status, headers, body, read = knock(
        "/subjects/7/",
        {
            "cookie": cookie,
            "host": "studio.example",
            "referer": "https://studio.example/subjects/7/",
        },
    )

    assert status == 413
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert SAID in body
    assert '<a class="button" href="/subjects/7/">Go back</a>' in body
    assert re.search(r'<link rel="stylesheet" href="/static/studio/studio[^"]*\.css">', body)
    assert read == 0


@pytest.mark.parametrize(
    "referer",
    ["", "https://elsewhere.example/subjects/7/", "//elsewhere.example/x", "javascript:alert(1)"],
)
def test_it_leads_back_to_the_subjects_unless_the_referer_is_a_page_of_the_site(cookie, referer):
    headers = {"cookie": cookie, "host": "studio.example"}
    if referer:
        headers["referer"] = referer

    _status, _headers, body, _read = knock("/subjects/7/", headers)

    assert '<a class="button" href="/subjects/">Go back</a>' in body


def test_it_asks_a_signed_in_upload_sent_in_chunks_for_its_length_unread(cookie):
    """Django reads a multipart form without a length as empty (docs/design.md)."""
    status, _headers, body, read = knock(
        "/subjects/7/", {"cookie": cookie, "host": "studio.example"}, chunks=400
    )

    assert status == 411
    assert body == (
        "An upload must state its size: send it with a Content-Length header, not in chunks."
    )
    assert read == 0


def test_it_cuts_off_a_signed_in_streamed_form_past_its_own_limit_naming_it(cookie):
    status, headers, body, read = knock(
        "/subjects/7/", {"cookie": cookie, "host": "studio.example"}, chunks=400, upload=False
    )

    assert status == 413
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body == (
        "The request body is too large "
        "(the limit is 2.5 MB for JSON and form fields; 26 MB for an upload)."
    )
    assert read == 3  # cut off once past 2.5 MB, not at 400 MiB


def test_it_keeps_answering_the_api_in_json(cookie):
    status, headers, body, _read = knock("/api/v1/subjects/7/references", {"cookie": cookie})

    # A session is no token: the API's 401 comes first, whatever the body (docs/api.md).
    assert status == 401
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "unauthorized"


def test_it_answers_someone_not_signed_in_as_signed_out_however_long_their_upload():
    """Found by a review: a stranger's upload saying 500 MB was told of the signed-in limit
    (26 MB), one of 100 KB that its sender was not signed in; both are the latter now."""
    status, headers, body, read = knock(
        "/subjects/7/", {"host": "studio.example", "referer": "http://studio.example/subjects/7/"}
    )

    assert status == 413 and read == 0
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "You were signed out, so what you sent was not done" in body
    assert "too large (the limit is" not in body
    assert 'href="/accounts/login/?next=%2Fsubjects%2F7%2F"' in body, body


def test_it_answers_someone_not_signed_in_sending_a_form_in_plain_text():
    status, headers, body, _read = knock("/subjects/7/", {"host": "studio.example"}, upload=False)

    assert status == 413
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert "<" not in body and "may carry at most 64 KB" in body


def test_it_falls_back_to_the_sentence_when_the_page_cannot_be_drawn(cookie, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> str:
        raise ValueError("Missing staticfiles manifest entry for 'studio/studio.css'")

    monkeypatch.setattr("avatars.door_pages.render_to_string", broken)

    status, headers, body, _read = knock("/subjects/7/", {"cookie": cookie})

    assert status == 413
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert "too large" in body


def test_a_signed_in_upload_not_let_in_gets_a_page_saying_to_send_it_again(cookie, monkeypatch):
    """Past AVATARS_UPLOAD_BODIES_AT_ONCE an upload waits; one not let in in time gets the
    studio's page, leading back, not the API's JSON nor bare text (tests/e2e/
    test_upload_bodies.py waits over uvicorn)."""

    @contextlib.asynccontextmanager
    async def no_place(person: str) -> AsyncIterator[bool]:
        assert person != "None", "a signed-in upload is someone's"
        yield False

    monkeypatch.setattr(upload_bodies, "admitted", no_place)
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(dict(message))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the body reached Django")

    headers = {
        "cookie": cookie,
        "host": "studio.example",
        "referer": "https://studio.example/subjects/7/",
        "content-length": "1000",
        "content-type": "multipart/form-data; boundary=x",
    }
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/subjects/7/",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    async_to_sync(BodyLimit(app))(scope, None, send)

    start, body = sent[0], sent[1]["body"].decode()
    said = {k.decode(): v.decode() for k, v in start["headers"]}
    assert start["status"] == 503 and said["retry-after"] == "5"
    assert said["content-type"].startswith("text/html")
    assert "Avatars is receiving as many photos as it takes at once" in body
    assert 'href="/subjects/7/"' in body
