"""The JSON API's idempotency keys: a repeated request plans nothing more (docs/api.md)."""

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from studio.api.auth import issue_token
from studio.engine import planning
from studio.models import (
    Batch,
    Task,
)
from tests.api.calls import API, bearing, error
from tests.factories import (
    batch_request,
)

pytestmark = pytest.mark.django_db


# --- idempotency keys -------------------------------------------------------------


def post_keyed(client: Client, body: object, key: str) -> Any:
    return client.post(
        f"{API}/batches",
        json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def test_it_answers_a_repeated_idempotency_key_with_the_first_batch_and_plans_nothing(
    api, subject, ember
):
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": 2}])
    first = post_keyed(api, request, "spring-2026-retry-1")

    again = post_keyed(api, request, "spring-2026-retry-1")

    assert (first.status_code, again.status_code) == (202, 202)
    batch = Batch.objects.get()
    assert again["Location"] == first["Location"] == f"{API}/batches/{batch.pk}"
    assert again.json() == first.json()
    assert Task.objects.count() == 2
    assert len(ember.calls) == 0


def test_it_takes_the_same_body_with_its_fields_in_another_order_as_the_same_request(api, subject):
    request = batch_request(subject)
    first = post_keyed(api, request, "k-1")

    again = post_keyed(api, dict(reversed(list(request.items()))), "k-1")

    assert again.status_code == 202
    assert again["Location"] == first["Location"]
    assert Batch.objects.count() == 1


def test_it_refuses_an_idempotency_key_reused_with_a_different_body_and_plans_nothing(api, subject):
    first = post_keyed(api, batch_request(subject), "k-1")

    other = post_keyed(api, batch_request(subject, prompt="a different portrait"), "k-1")

    assert other.status_code == 422
    assert error(other) == {
        "code": "idempotency_key_reused",
        "message": "This Idempotency-Key was already used with a different request body; "
        "send a new key to plan another batch.",
    }
    assert [str(b.pk) for b in Batch.objects.all()] == [first.json()["id"]]
    assert Task.objects.count() == 1


def test_it_keeps_each_users_idempotency_keys_apart(api, subject):
    other = bearing(issue_token(user=User.objects.create_user("other-script")))
    first = post_keyed(api, batch_request(subject), "k-1")

    theirs = post_keyed(other, batch_request(subject), "k-1")

    assert theirs.status_code == 202
    assert theirs["Location"] != first["Location"]
    assert Batch.objects.count() == 2
    assert {b.created_by.username for b in Batch.objects.all()} == {"family-script", "other-script"}


def test_it_forgets_an_idempotency_key_after_24_hours(api, subject, monkeypatch):
    first = post_keyed(api, batch_request(subject), "k-1")
    later = timezone.now() + timedelta(hours=24, minutes=1)
    monkeypatch.setattr(timezone, "now", lambda: later)

    again = post_keyed(api, batch_request(subject), "k-1")
    once_more = post_keyed(api, batch_request(subject), "k-1")

    assert again.status_code == 202
    assert again["Location"] != first["Location"]
    assert once_more["Location"] == again["Location"]  # remembered again, from now on
    assert Batch.objects.count() == 2


def test_it_still_remembers_an_idempotency_key_just_inside_24_hours(api, subject, monkeypatch):
    first = post_keyed(api, batch_request(subject), "k-1")
    later = timezone.now() + timedelta(hours=23, minutes=59)
    monkeypatch.setattr(timezone, "now", lambda: later)

    again = post_keyed(api, batch_request(subject), "k-1")

    assert again["Location"] == first["Location"]
    assert Batch.objects.count() == 1


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * 201, "The Idempotency-Key must be at most 200 characters."),
        ("", "The Idempotency-Key must not be empty."),
        ("k\x01", "The Idempotency-Key must be printable ASCII (a UUID is a good one)."),
        ("k\x7f", "The Idempotency-Key must be printable ASCII (a UUID is a good one)."),
        ("kl\u00e9", "The Idempotency-Key must be printable ASCII (a UUID is a good one)."),
    ],
    ids=["too-long", "empty", "control", "delete", "not-ascii"],
)
def test_it_refuses_an_unusable_idempotency_key_and_plans_nothing(api, subject, key, message):
    response = post_keyed(api, batch_request(subject), key)

    assert response.status_code == 400
    assert error(response) == {"code": "invalid_idempotency_key", "message": message}
    assert not Batch.objects.exists()


def test_it_accepts_an_idempotency_key_of_200_characters(api, subject):
    key = "k" * 200
    first = post_keyed(api, batch_request(subject), key)

    again = post_keyed(api, batch_request(subject), key)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again["Location"] == first["Location"]


def test_it_records_no_key_for_a_refused_batch(api, subject):
    refused = post_keyed(api, batch_request(subject, prompt=" "), "k-1")

    accepted = post_keyed(api, batch_request(subject), "k-1")

    assert refused.status_code == 400
    assert accepted.status_code == 202
    assert Batch.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cap", [None, 3], ids=["no cap", "a cap the batch fills"])
def test_it_plans_one_batch_for_two_concurrent_requests_with_the_same_key(
    subject, monkeypatch, settings, cap
):
    """With the cap exactly full after the first, the twin still gets the first batch
    (found by a review: it answered 429, as if nothing had been planned)."""
    if cap is not None:
        settings.AVATARS_DAILY_TASK_CAP = cap
    token = issue_token(user=User.objects.create_user("family-script"))
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": 3}])
    # Both requests have looked for the key (and found none) before either plans:
    # the race the unique (user, key) constraint must settle.
    both_checked = threading.Barrier(2, timeout=10)
    validate = planning.validate

    def validate_in_step(body: Any) -> Any:
        both_checked.wait()
        return validate(body)

    monkeypatch.setattr(planning, "validate", validate_in_step)
    answers: list[Any] = []

    def post() -> None:
        try:
            answers.append(post_keyed(bearing(token), request, "double-click"))
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert [a.status_code for a in answers] == [202, 202]
    batch = Batch.objects.get()
    assert {a["Location"] for a in answers} == {f"{API}/batches/{batch.pk}"}
    assert answers[0].json()["id"] == answers[1].json()["id"] == str(batch.pk)
    assert Task.objects.count() == 3


def written_otherwise(subject) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(what differs, the first body, a retry's body) pairs asking for the same batch."""
    base = batch_request(subject, providers=[{"provider": "openai", "candidates": 2}])
    del base["frames"]
    default_model = planning.validate(base)["providers"][0]["model"]
    default_frames = planning.validate(base)["frames"]
    return [
        ("2.0 for 2", base, {**base, "providers": [{"provider": "openai", "candidates": 2.0}]}),
        ("null for absent", base, {**base, "frames": None}),
        ("the default framings named", base, {**base, "frames": default_frames}),
        (
            "the default model named",
            base,
            {
                **base,
                "providers": [{"provider": "openai", "model": default_model, "candidates": 2}],
            },
        ),
    ]


@pytest.mark.parametrize("case", range(4))
def test_a_retry_written_otherwise_asking_for_the_same_batch_gets_the_first(api, subject, case):
    """Found by a review: a retry that wrote `2.0` for `2`, null for a field left out or a
    default by name was a 422, which docs/api.md calls the same request."""
    what, first_body, retry_body = written_otherwise(subject)[case]
    first = post_keyed(api, first_body, "k-1")

    again = post_keyed(api, retry_body, "k-1")

    assert again.status_code == 202, (what, again.content)
    assert again["Location"] == first["Location"]
    assert Batch.objects.count() == 1 and Task.objects.count() == 2


def test_a_retry_asking_for_more_candidates_is_still_refused(api, subject):
    first = post_keyed(api, batch_request(subject), "k-1")
    more = batch_request(subject, providers=[{"provider": "openai", "candidates": 2.0}])

    other = post_keyed(api, more, "k-1")

    assert other.status_code == 422
    assert [str(b.pk) for b in Batch.objects.all()] == [first.json()["id"]]
