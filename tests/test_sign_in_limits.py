"""Failed sign-ins: counted per username and address, then refused for a while (docs/design.md §12).

After five wrong passwords for one username from one address, that pair is refused with
the studio's sign-in page, a 429 and the wait, even with the right password, until 15
minutes have passed since its last try. A right password before that starts afresh.
"""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.studio_pages import text

pytestmark = pytest.mark.django_db

LIMIT = 5
RIGHT = "right-password-1"
REFUSED = "Too many failed sign-ins for this username from this address. Try again in 15 minutes."


@pytest.fixture
def grace(settings) -> User:
    # A hasher of no cost: these tests sign in hundreds of times (the real one is in e2e).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return User.objects.create_user("grace", password=RIGHT)


def sign_in(client: Client, password: str, *, username: str = "grace", address: str = "10.0.0.1"):
    return client.post(
        "/accounts/login/",
        {"username": username, "password": password, "next": "/gallery/"},
        REMOTE_ADDR=address,
    )


def wait_out_the_cool_off() -> None:
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=15, seconds=1))


def test_the_fifth_wrong_password_is_refused_and_then_the_right_one_too(client, grace):
    for attempt in range(1, LIMIT):
        wrong = sign_in(client, "guess")
        assert wrong.status_code == 200, f"wrong password {attempt} of {LIMIT}"
        assert "did not match" in text(wrong)

    fifth = sign_in(client, "guess")
    right = sign_in(client, RIGHT)

    for refused in (fifth, right):
        assert refused.status_code == 429
        assert refused["Retry-After"] == "900"
        assert "no-store" in refused["Cache-Control"]
        assert REFUSED in text(refused)
        assert "did not match" not in text(refused)
        assert 'name="username"' in refused.text and 'value="grace"' in refused.text
        assert 'name="next" value="/gallery/"' in refused.text
    assert client.get("/").status_code == 302, "the right password signed in while refused"


def test_the_refusal_is_for_that_username_from_that_address_only(client, grace):
    User.objects.create_user("ada", password=RIGHT)
    for _ in range(LIMIT):
        sign_in(client, "guess", address="10.0.0.66")

    assert sign_in(client, RIGHT, address="10.0.0.66").status_code == 429
    assert sign_in(Client(), RIGHT, address="10.0.0.7").status_code == 302, "another address"
    assert sign_in(Client(), RIGHT, username="ada", address="10.0.0.66").status_code == 302


def test_the_refusal_ends_when_the_wait_has_passed_since_the_last_try(client, grace):
    for _ in range(LIMIT):
        sign_in(client, "guess")
    wait_out_the_cool_off()

    assert sign_in(client, RIGHT).status_code == 302
    assert client.get("/").status_code == 200


def test_the_admin_sign_in_is_counted_too(client, grace):
    grace.is_staff = True
    grace.save()
    for _ in range(LIMIT):
        client.post("/admin/login/", {"username": "grace", "password": "guess"})

    refused = client.post("/admin/login/?next=/admin/", {"username": "grace", "password": RIGHT})

    assert refused.status_code == 429
    assert REFUSED in text(refused)
    assert client.get("/admin/").status_code == 302


ADDRESSES = ("10.0.0.1", "10.0.0.2")
USERNAMES = ("grace", "mallory")  # mallory has no account: every try of hers is wrong
TRIES = st.one_of(
    st.tuples(st.just("right"), st.just("grace"), st.sampled_from(ADDRESSES)),
    st.tuples(st.just("wrong"), st.sampled_from(USERNAMES), st.sampled_from(ADDRESSES)),
    st.tuples(st.just("wait"), st.just(""), st.just("")),
)


@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tries=st.lists(TRIES, max_size=16))
def test_any_run_of_tries_is_answered_as_the_count_says(grace, tries):
    """A model of the rule: each (username, address) counts its failures since its last
    success or the last wait; at the limit every try of that pair is refused."""
    AccessAttempt.objects.all().delete()
    failures: dict[tuple[str, str], int] = {}
    for number, (kind, username, address) in enumerate(tries, 1):
        if kind == "wait":
            wait_out_the_cool_off()
            failures.clear()
            continue
        pair = (username, address)
        locked = failures.get(pair, 0) >= LIMIT
        answer = sign_in(
            Client(), RIGHT if kind == "right" else "guess", username=username, address=address
        )
        if kind == "right" and not locked:
            assert answer.status_code == 302, f"try {number}: {kind} {pair} was not let in"
            failures[pair] = 0
            continue
        failures[pair] = failures.get(pair, 0) + 1
        expected = 429 if failures[pair] >= LIMIT else 200
        assert answer.status_code == expected, (
            f"try {number}: {kind} {pair} after {failures[pair] - 1} failures "
            f"got {answer.status_code}, not {expected}"
        )
