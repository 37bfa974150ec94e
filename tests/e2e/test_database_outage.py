"""A database out of reach, over a real uvicorn: every answer says so, and the server recovers.

The install's SQLite file is put aside and a folder takes its name, so SQLite cannot open
it, as on a data dir whose disk went read-only (its side files cannot be made) or away.
"""

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.wire import limited
from tests.processes import Template, server_url

# The outage is made on SQLite's file; PostgreSQL's is tests/test_outage.py's (its driver's
# errors), and a server restarted under the web is tests/e2e/test_pg_restart.py's.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(server_url()), reason="SQLite's file"),
]

PAGE = "The studio cannot reach its records"
# As deployed: DEBUG off (a real secret then; with it on, Django's own page shows the error),
# plain HTTP on loopback, its cookies sent over it.
DEPLOYED = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "a-test-secret-" * 5,
    "AVATARS_SSL_REDIRECT": "false",
    "AVATARS_SECURE_COOKIES": "false",
}
SUBJECTS = (
    "from studio.models import Subject\n"
    "result = sorted(Subject.objects.values_list('name', flat=True))"
)


@contextlib.contextmanager
def out_of_reach(database: Path) -> Iterator[None]:
    """Put the database (and its side files) aside, a folder in its place; then put it back."""
    files = [p for p in (database, *database.parent.glob(f"{database.name}-*")) if p.exists()]
    for path in files:
        path.rename(path.with_name(f"{path.name}.aside"))
    database.mkdir()
    try:
        yield
    finally:
        database.rmdir()
        for path in files:
            path.with_name(f"{path.name}.aside").rename(path)


def csrf(page: httpx.Response) -> str:
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    return token[1]


def test_a_database_out_of_reach_is_said_as_such_and_the_server_answers_again_after(
    tmp_path: Path, template: Template
):
    """Found by a review (a read-only data dir): every page said "Something went wrong here",
    an error of the studio's own, and the log held two 130-line tracebacks a request."""
    with limited(tmp_path, template, **DEPLOYED) as (web, stack, _spool, token, _subject):
        browser = httpx.Client(base_url=web.url, headers={"Referer": f"{web.url}/subjects/"})
        api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"})
        login = browser.get("/accounts/login/")
        data = {"username": "ada", "password": "x" * 12, "csrfmiddlewaretoken": csrf(login)}
        assert browser.post("/accounts/login/", data=data).status_code == 302
        form = csrf(browser.get("/subjects/"))

        with out_of_reach(stack.data_dir / "db.sqlite3"):
            answers = {
                "a page": browser.get("/"),
                "the sign-in page": browser.get("/accounts/login/"),
                "a form sent": browser.post(
                    "/subjects/", data={"name": "Bo", "csrfmiddlewaretoken": form}
                ),
                "an API read": api.get("/api/v1/subjects"),
                "an API write": api.post("/api/v1/subjects", json={"name": "Cy"}),
            }

        again = [browser.get("/subjects/").status_code, api.get("/api/v1/subjects").status_code]
        log = (stack.data_dir / "web.log").read_text()
        names = stack.django(SUBJECTS)
        browser.close()
        api.close()

    said = {what: (a.status_code, a.headers.get("retry-after")) for what, a in answers.items()}
    assert set(said.values()) == {(503, "30")}, said
    for what in ("a page", "the sign-in page", "a form sent"):
        assert answers[what].headers["content-type"].startswith("text/html"), what
        assert PAGE in answers[what].text, (what, answers[what].text[:300])
    # A form sent is said not saved, with the way back to its page (a review: the page said
    # only that "this page could not be shown", and led to the batches).
    assert "what you sent was not saved" in answers["a form sent"].text
    assert '<a href="/subjects/">back to the page you were on</a>' in answers["a form sent"].text
    assert "this page could not be shown" in answers["a page"].text
    for what in ("an API read", "an API write"):
        assert answers[what].json()["error"]["code"] == "database_unavailable", what
    assert again == [200, 200], again
    assert names == ["Ada"], f"written while the database was out of reach: {names}"
    lines = [line for line in log.splitlines() if "the database cannot be used" in line]
    # One line a request: a review counted two for every page (the person was looked up
    # again, and failed again, on the answer's way out).
    assert len(lines) == len(answers), "\n".join(lines)
    assert all("(unable to open database file)" in line for line in lines), lines
    assert "Traceback" not in log, log[-3000:]
