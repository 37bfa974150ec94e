"""Structured logs: one line per state change; no token and no image bytes (hardening)."""

import base64
import logging
import re

import pytest
from django.db import transaction

from studio.models import Task, TaskState
from studio.store import move
from tests.factories import a_batch, drain, plan
from tests.fake_ember import FakeEmber
from tests.processes import run_snippet

pytestmark = pytest.mark.django_db

LINE = re.compile(r"^task=(?P<task>[0-9a-f-]{36}) from=(?P<from>\w+) to=(?P<to>\w+) phase='.*'$")


def test_every_state_change_is_logged_once_as_one_line(
    subject, ember, worker, caplog, django_capture_on_commit_callbacks
):
    FakeEmber(ember, history=False)
    batch = a_batch(subject, candidates=2)
    caplog.set_level(logging.INFO, logger="studio")

    with django_capture_on_commit_callbacks(execute=True):  # the test's transaction
        drain(worker)

    lines = [r.getMessage() for r in caplog.records if r.name == "studio.tasks"]
    changes = [LINE.match(line) for line in lines]
    assert all(changes), lines
    for task in batch.tasks.all():
        path = [(m["from"], m["to"]) for m in changes if m and m["task"] == str(task.pk)]
        assert path == [
            ("queued", "preparing"),
            ("preparing", "submitting"),
            ("submitting", "running"),
            ("running", "copying"),
            ("copying", "history_missing"),
        ]
    assert Task.objects.filter(state=TaskState.HISTORY_MISSING).count() == 2


def test_a_state_change_rolled_back_is_not_logged(subject, caplog):
    """Found by a review on a full disk: changes whose transaction failed were logged, four
    `to=uncertain` lines for one change; the log read as a record of what never happened."""
    [task] = plan(subject)
    caplog.set_level(logging.INFO, logger="studio")

    with pytest.raises(RuntimeError), transaction.atomic():
        move(task, TaskState.PREPARING)
        raise RuntimeError("the commit fails")

    assert [r.getMessage() for r in caplog.records if r.name == "studio.tasks"] == []


def test_logs_carry_no_token_and_no_image_bytes(subject, ember, worker, caplog, settings):
    fake = FakeEmber(ember)
    a_batch(subject)
    caplog.set_level(logging.DEBUG)

    drain(worker)

    text = "\n".join(r.getMessage() for r in caplog.records)
    assert settings.EMBER_TOKEN not in text
    image = next(iter(fake.images.values()))
    reference = fake.submits[0]["references"][0]["data"]
    assert base64.b64encode(image).decode()[:40] not in text
    assert reference[:40] not in text
    assert "\\x89PNG" not in text and "PNG\r\n" not in text


SERVER_ERROR = """
import logging
import django
django.setup()
from django.test import RequestFactory
from django.core.handlers.exception import response_for_exception

request = RequestFactory().get("/batches/")
try:
    raise RuntimeError("a bug the family must not be the only one to see")
except RuntimeError as exc:
    response = response_for_exception(request, exc)
print(response.status_code)
"""


def test_a_server_error_in_production_is_logged_with_its_traceback(tmp_path):
    """With DEBUG off, Django's console is quiet and it mails ADMINS (none): 500s left no trace."""
    secret = "a-test-secret-" * 5
    done = run_snippet(
        SERVER_ERROR, data_dir=tmp_path, DJANGO_DEBUG="false", DJANGO_SECRET_KEY=secret
    )

    assert done.stdout.strip() == "500"
    assert "ERROR django.request Internal Server Error: /batches/" in done.stderr, done.stderr
    assert "RuntimeError: a bug the family must not be the only one to see" in done.stderr
