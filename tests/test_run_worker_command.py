"""`manage.py run_worker` as a process starts it: the interpreter set for the worker's threads."""

import io
import sys

import pytest
from django.core.management import call_command

from studio.worker.loop import SWITCH_INTERVAL

# The worker's database thread runs on its own connection: real commits, no test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_worker_hands_the_interpreter_between_its_threads_every_half_millisecond(
    monkeypatch,
):
    asked: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", asked.append)  # the test process keeps its own
    out = io.StringIO()

    call_command("run_worker", "--once", stdout=out)

    assert asked == [SWITCH_INTERVAL] and SWITCH_INTERVAL == 0.0005, asked
    assert "Avatars worker running" in out.getvalue()
