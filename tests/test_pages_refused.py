"""The pages a person meets when the studio refuses a request before any page of its own
answers: a form that stayed open too long (CSRF), an address that only takes a button press
(405). Each is the studio's page, with its navigation and a way back; the API keeps its JSON.
"""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from studio.api.auth import issue_token
from studio.models import Subject
from tests.api.calls import API, bearing
from tests.factories import a_batch
from tests.studio_pages import messages_of, text

pytestmark = pytest.mark.django_db

VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


@pytest.fixture(autouse=True)
def production(settings: Settings) -> None:
    """As the studio runs for the family: DEBUG off."""
    settings.DEBUG = False


@pytest.fixture
def strict(person: User) -> Client:
    """A signed-in browser whose forms are checked for their CSRF token, as a real one's are."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(person)
    return browser


def test_a_stale_form_gets_the_studios_page_saying_to_go_back_and_try_again(strict: Client):
    response = strict.post(reverse("studio:subjects"), {"name": "Ada"})

    assert response.status_code == 403
    page = text(response)
    assert "This form could not be sent" in page
    assert "open for a long time, or you signed in again" in page
    assert "Go back, reload the page so the form is fresh, and try again." in page
    assert "New batch" in page and "Back to the batches" in page  # the studio's navigation
    assert VIEWPORT in response.content.decode()
    assert "CSRF verification failed" not in page
    assert not Subject.objects.filter(name="Ada").exists()


def test_a_stale_form_leads_back_to_its_page_but_never_elsewhere(strict: Client):
    """Found by a re-review: the page said "go back" and linked only to the batches."""
    mine = strict.post(
        reverse("studio:subjects"),
        {"name": "Ada"},
        HTTP_REFERER="http://testserver/subjects/?page=2",
    )
    theirs = strict.post(
        reverse("studio:subjects"), {"name": "Ada"}, HTTP_REFERER="https://evil.example/x"
    )

    assert '<a href="/subjects/?page=2">Back to the form\'s page</a>' in mine.content.decode()
    assert "evil.example" not in theirs.content.decode()
    assert "Back to the form's page" not in text(theirs)


@pytest.mark.parametrize("path", ["//evil.example/x", "/\\evil.example/x", "///evil.example/x"])
def test_a_page_of_this_site_whose_path_reads_as_another_site_is_not_linked(
    strict: Client, path: str
):
    """Found by a review: a Referer of http://testserver//evil.example/x linked off-site."""
    refused = strict.post(
        reverse("studio:subjects"), {"name": "Ada"}, HTTP_REFERER=f"http://testserver{path}"
    )

    assert "evil.example" not in refused.content.decode()
    assert "Back to the form's page" not in text(refused)


def test_a_stale_sign_in_form_gets_the_studios_page_too():
    response = Client(enforce_csrf_checks=True).post(
        reverse("login"), {"username": "grace", "password": "not-a-real-password"}
    )

    assert response.status_code == 403
    assert "This form could not be sent" in text(response)
    assert VIEWPORT in response.content.decode()


def test_an_address_that_only_takes_a_button_press_gets_a_page_saying_so(signed_in: Client):
    response = signed_in.get(reverse("logout"))

    assert response.status_code == 405
    assert "POST" in response["Allow"]
    page = text(response)
    assert "This address only takes a form's button press" in page
    assert "Nothing was changed." in page
    assert "Back to the batches" in page and "New batch" in page
    assert VIEWPORT in response.content.decode()


@pytest.mark.parametrize("name", ["studio:subject-rename", "studio:batch-cancel"])
def test_an_actions_address_opened_leads_to_its_page_saying_so(
    signed_in: Client, subject: Subject, name: str
):
    batch = a_batch(subject)
    row = subject if name == "studio:subject-rename" else batch
    action = reverse(name, args=[row.pk])
    home = action.removesuffix("rename/").removesuffix("cancel/")

    response = signed_in.get(action, follow=True)

    assert response.redirect_chain == [(home, 302)]
    assert messages_of(response) == [
        "That address only takes a form's button press, so here is its page: nothing was changed."
    ]


def test_a_form_sent_after_signing_out_returns_to_its_page_once_signed_in_again(
    client: Client, person, subject: Subject
):
    """Found by a re-review: signing in again ended on the 405 page, the form's page lost."""
    sent = client.post(reverse("studio:subject-rename", args=[subject.pk]), {"name": "Bea"})
    assert sent.status_code == 302 and "next=" in sent["Location"]
    client.force_login(person)

    response = client.get(sent["Location"].split("next=")[1].replace("%2F", "/"), follow=True)

    assert response.redirect_chain[-1] == (f"/subjects/{subject.pk}/", 302)
    assert response.status_code == 200


def test_the_api_still_answers_405_in_json(subject: Subject):
    api = bearing(issue_token(user=User.objects.create_user("family-script")))

    response = api.get(f"{API}/batches")

    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_photo_whose_file_name_is_too_long_to_read_is_said_so(signed_in: Client, subject):
    """Found by a review over uvicorn: a 5,000-character file name got "The form or upload
    could not be read", which does not say what to change; the API said it already."""
    name = "a" * 5000 + ".png"  # as a browser sends it (Django's own client cuts it to 255)
    body = (
        f'--B\r\nContent-Disposition: form-data; name="photo"; filename="{name}"\r\n'
        "Content-Type: image/png\r\n\r\n\x89PNG\r\n--B--\r\n"
    )

    answer = signed_in.post(
        f"/subjects/{subject.pk}/",
        body,
        content_type="multipart/form-data; boundary=B",
        HTTP_REFERER=f"http://testserver/subjects/{subject.pk}/",
    )

    assert answer.status_code == 400
    said = answer.content.decode()
    assert "The photo&#x27;s file name is too long to read" in said, said
    assert f'href="/subjects/{subject.pk}/"' in said, "no way back to the photo's form"
