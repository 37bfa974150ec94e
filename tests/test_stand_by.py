"""`stand_by`: how a standby waits for the owner's locks (the processes: test_standby.py)."""

import logging

import pytest
from django.db import OperationalError

from studio.ownership import STANDING_BY, AlreadyRunning, stand_by


def refusing(times: int, error: Exception):
    """An `acquire` that raises `error` `times` times, then takes the locks."""
    calls: list[int] = []

    def acquire() -> None:
        calls.append(1)
        if len(calls) <= times:
            raise error

    return acquire, calls


@pytest.mark.django_db
def test_it_takes_the_locks_at_once_when_they_are_free_and_says_nothing(caplog):
    acquire, calls = refusing(0, AlreadyRunning())

    with caplog.at_level(logging.INFO, logger="studio.worker"):
        stand_by(acquire, poll=0)

    assert calls == [1]
    assert "standing by" not in caplog.text
    assert "took over" not in caplog.text


@pytest.mark.django_db
def test_it_stands_by_while_another_worker_owns_the_database_then_takes_over(caplog):
    acquire, calls = refusing(3, AlreadyRunning())

    with caplog.at_level(logging.INFO, logger="studio.worker"):
        stand_by(acquire, poll=0)

    assert len(calls) == 4
    assert caplog.text.count(STANDING_BY) == 1  # said once, not once a try
    assert "took over" in caplog.text
    assert caplog.text.index(STANDING_BY) < caplog.text.index("took over")


@pytest.mark.django_db
def test_it_waits_out_a_database_that_does_not_answer_while_it_stands_by(caplog):
    acquire, calls = refusing(2, OperationalError("the server is restarting"))

    with caplog.at_level(logging.INFO, logger="studio.worker"):
        stand_by(acquire, poll=0)

    assert len(calls) == 3
    assert "the database did not answer: the server is restarting" in caplog.text
    assert "took over" in caplog.text
