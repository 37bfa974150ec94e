"""What counts as the database out of reach (a 503, one log line), and what stays a bug.

The errors are SQLite's own, raised by real connections and wrapped as Django wraps them;
PostgreSQL's are its driver's classes, which carry their SQLSTATE. Over uvicorn, with the
answers a person and a script see: tests/e2e/test_database_outage.py.
"""

import logging
import sqlite3
import sys

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError
from django.test import Client

from avatars.logfilters import DatabaseOutage
from studio import dbfaults
from studio.api.auth import issue_token
from tests.sqlite_errors import sqlite_error


@pytest.mark.parametrize("how", ["cannot open", "read-only", "full", "locked", "not a database"])
def test_sqlite_that_cannot_open_read_or_write_its_file_is_out_of_reach(tmp_path, how):
    exc = sqlite_error(tmp_path, how)
    assert dbfaults.unusable(exc), f"{how}: {exc} ({exc.__cause__.sqlite_errorname})"


def test_sqlite_s_locking_protocol_failing_is_out_of_reach():
    """Another process holding the write-ahead log's locks past SQLite's retries: every
    query fails for as long, whatever it is (a review's)."""
    protocol = sqlite3.OperationalError("locking protocol")
    protocol.sqlite_errorcode, protocol.sqlite_errorname = 15, "SQLITE_PROTOCOL"
    assert dbfaults.unusable(as_django(protocol, OperationalError))


def test_a_query_sqlite_refuses_is_a_bug_not_an_outage(tmp_path):
    """ "no such table" is an OperationalError too: a migration not run, or a bug."""
    exc = sqlite_error(tmp_path, "no such table")
    assert isinstance(exc, OperationalError)
    assert not dbfaults.unusable(exc)


def as_django(driver_error: BaseException, kind: type[DatabaseError]) -> DatabaseError:
    exc = kind(*driver_error.args)
    exc.__cause__ = driver_error
    return exc


@pytest.mark.parametrize(
    ("driver_error", "out_of_reach"),
    [
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.DiskFull("could not extend file"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.errors.UndefinedTable('relation "x" does not exist'), False),
        # The server gave up on a query under load, as SQLite's busy timeout: try again.
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), True),
        (psycopg.errors.SyntaxError('syntax error at or near "x"'), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_postgresql_out_of_reach_by_its_sqlstate(driver_error, out_of_reach):
    assert dbfaults.unusable(as_django(driver_error, OperationalError)) is out_of_reach


@pytest.mark.parametrize(
    ("driver_error", "out_of_reach"),
    [
        (psycopg.InterfaceError("the connection is closed"), True),
        (psycopg.InterfaceError("the cursor is closed"), False),  # the code's own doing
    ],
    ids=["connection closed", "cursor closed"],
)
def test_postgresql_interface_errors_only_for_a_lost_connection(driver_error, out_of_reach):
    """Found by a review: a cursor the code closed was called an outage, its traceback gone."""
    assert dbfaults.unusable(as_django(driver_error, InterfaceError)) is out_of_reach


def test_other_errors_are_not_an_outage():
    sqlite_full = sqlite3.OperationalError("database or disk is full")  # no result code
    assert not dbfaults.unusable(as_django(sqlite_full, IntegrityError))
    assert not dbfaults.unusable(RuntimeError("a bug"))
    assert not dbfaults.unusable(OperationalError("no cause"))
    assert not dbfaults.unusable(None)


def record_of(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "django.request", logging.ERROR, __file__, 1, "%s: %s", ("Service Unavailable", "/"), info
    )


def test_the_log_says_an_outage_in_one_line_and_keeps_a_bugs_traceback(tmp_path):
    out = record_of(sqlite_error(tmp_path, "cannot open"))
    bug = record_of(ZeroDivisionError("division by zero"))

    assert DatabaseOutage().filter(out) and DatabaseOutage().filter(bug)

    said = logging.Formatter("%(levelname)s %(message)s").format(out)
    assert said == (
        "ERROR Service Unavailable: /: the database cannot be used (unable to open database file)"
    )
    assert bug.exc_info is not None, "a bug's traceback was dropped"


@pytest.mark.django_db
def test_a_studio_page_and_an_api_call_answer_503_with_debug_off(settings, monkeypatch, tmp_path):
    """With DEBUG off, as deployed (on, Django shows its own page with the error)."""
    settings.DEBUG = False
    exc = sqlite_error(tmp_path, "cannot open")

    def out_of_reach(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr("studio.web.views.batches.render", out_of_reach)
    monkeypatch.setattr("studio.api.views.subject_json", out_of_reach)
    person = User.objects.create_user("bo", password="x" * 12)
    browser = Client(raise_request_exception=False)
    browser.force_login(person)
    script = Client(
        raise_request_exception=False,
        headers={"Authorization": f"Bearer {issue_token(user=person)}"},
    )

    page = browser.get("/")
    answer = script.post("/api/v1/subjects", {"name": "Ada"}, content_type="application/json")

    assert (page.status_code, page["Retry-After"]) == (503, "30")
    assert "The studio cannot reach its records" in page.content.decode()
    assert (answer.status_code, answer["Retry-After"]) == (503, "30")
    assert answer.json()["error"]["code"] == "database_unavailable"
