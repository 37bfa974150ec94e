"""Structured logs: one line per state change; no token and no image bytes (hardening)."""

import base64
import logging
import re

import pytest

from studio.models import Task, TaskState
from tests.factories import a_batch, drain
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

LINE = re.compile(r"^task=(?P<task>[0-9a-f-]{36}) from=(?P<from>\w+) to=(?P<to>\w+) phase='.*'$")


def test_every_state_change_is_logged_once_as_one_line(subject, ember, worker, caplog):
    FakeEmber(ember, history=False)
    batch = a_batch(subject, candidates=2)
    caplog.set_level(logging.INFO, logger="studio")

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
