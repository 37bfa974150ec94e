"""A request for a host the server does not serve is a 400: JSON under the API, a page elsewhere.

Found by a review over uvicorn: with DEBUG off, an API call whose `Host` was not in
ALLOWED_HOSTS got Django's HTML 400 page, not the API's error shape. As deployed (DEBUG
off); with it on, Django shows its debugging page instead.
"""

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.test import Client

from studio.api import paging
from studio.api.auth import issue_token
from tests.api.calls import API, error

pytestmark = pytest.mark.django_db

OTHER_HOST = "avatars.example.net"
NOT_SERVED = {
    "code": "invalid_host",
    "message": "This server does not answer to the host the request names.",
}


@pytest.fixture
def deployed(settings) -> None:
    """A server with DEBUG off that answers to its own host name only."""
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["avatars.example.org"]


def a_script(token: str) -> Client:
    """A script's client that names a host the server does not answer to."""
    return Client(
        raise_request_exception=False,
        headers={"Authorization": f"Bearer {token}", "Host": OTHER_HOST},
    )


@pytest.mark.parametrize(
    ("method", "path"), [("get", "subjects"), ("post", "subjects"), ("get", "no/such/route")]
)
def test_it_answers_an_api_call_for_another_host_with_a_json_400(deployed, method, path):
    script = a_script(issue_token(user=User.objects.create_user("family-script")))

    response = getattr(script, method)(f"{API}/{path}")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert error(response) == NOT_SERVED
    assert "no-store" in response["Cache-Control"]  # as every API answer (a review's)


def test_it_answers_an_api_call_without_a_token_for_another_host_with_the_same_400(deployed):
    response = Client(raise_request_exception=False, headers={"Host": OTHER_HOST}).get(
        f"{API}/subjects"
    )

    assert response.status_code == 400
    assert error(response) == NOT_SERVED


def test_it_answers_any_other_request_django_refuses_under_the_api_with_a_json_400(
    deployed, monkeypatch
):
    def suspicious(*args: object, **kwargs: object) -> None:
        raise SuspiciousOperation("as Django says of a request it will not take")

    monkeypatch.setattr(paging, "page", suspicious)
    token = issue_token(user=User.objects.create_user("family-script"))
    script = Client(
        raise_request_exception=False,
        headers={"Authorization": f"Bearer {token}", "Host": "avatars.example.org"},
    )

    response = script.get(f"{API}/subjects")

    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid_request",
        "message": "The request could not be read.",
    }


def test_it_still_answers_a_studio_page_for_another_host_with_the_studios_400_page(
    deployed, signed_in
):
    browser = Client(raise_request_exception=False, headers={"Host": OTHER_HOST})
    browser.cookies = signed_in.cookies

    response = browser.get("/")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert "The request was not understood" in response.content.decode()


def test_it_answers_its_own_host_as_ever(deployed):
    token = issue_token(user=User.objects.create_user("family-script"))
    script = Client(headers={"Authorization": f"Bearer {token}", "Host": "avatars.example.org"})

    response = script.get(f"{API}/subjects")

    assert response.status_code == 200


def test_a_foreign_host_is_logged_in_one_line_without_a_traceback(deployed, caplog):
    """Found by a review over uvicorn: thirty lines of traceback for each such request."""
    Client(raise_request_exception=False, headers={"Host": OTHER_HOST}).get(f"{API}/subjects")

    [record] = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
    assert OTHER_HOST in record.getMessage()
    assert record.exc_info is None and record.exc_text is None
