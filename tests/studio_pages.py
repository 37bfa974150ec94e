"""Reading the studio's pages as a person does, for the page tests (Django's test client)."""

import html
import re
import secrets
from typing import Any

from asgiref.sync import async_to_sync
from django.test import Client

from studio.models import Subject


def served_bytes(response: Any) -> bytes:
    """Return the bytes a response sends: whole, or streamed (an original, read as it goes)."""
    if not response.streaming:
        return bytes(response.content)
    if response.is_async:

        async def gather() -> bytes:
            return b"".join([part async for part in response.streaming_content])

        return async_to_sync(gather)()
    return b"".join(response.streaming_content)


def text(response: Any) -> str:
    """The page as a person reads it: markup dropped, entities decoded, spaces collapsed."""
    body = response.content.decode()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def part(response: Any, pattern: str) -> str:
    """The text of the first part of the page that `pattern` (a regex over the markup) finds."""
    found = re.search(pattern, response.content.decode(), re.S)
    assert found, f"the page has no part like {pattern!r}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(0))).split())


def fieldset(response: Any, legend: str) -> str:
    return part(response, rf"<fieldset>\s*<legend>{legend}.*?</fieldset>")


def batch_form(subject: Subject, **overrides: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "title": "Summer",
        "prompt": "a friendly portrait, watercolour",
        "subjects": [subject.pk],
        "frames": ["image", "headshot"],
        "candidates_openai": 2,
        "candidates_flux": 1,
        "candidates_google": 0,
        # A fresh one-time token, as a newly rendered form carries.
        "token": secrets.token_urlsafe(24),
    }
    form.update(overrides)
    return form


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
