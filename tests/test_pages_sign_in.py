"""The studio pages, signed-in only: signing in and out, every page behind it, 404s."""

import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.views.defaults import server_error

from studio import engine
from studio.models import Asset, AvatarSet, Batch, Subject, Task, TaskState
from tests.factories import a_batch, png_bytes, stored_asset
from tests.studio_pages import batch_form, messages_of, text

pytestmark = pytest.mark.django_db


# --- sign-in ----------------------------------------------------------------------------


def every_route(subject: Subject, batch: Batch, asset: Asset, avatar_set: AvatarSet) -> list[str]:
    task = batch.tasks.first()
    assert task is not None
    return [
        reverse("studio:home"),
        reverse("studio:subjects"),
        reverse("studio:subject", args=[subject.pk]),
        reverse("studio:batch-new"),
        reverse("studio:batch", args=[batch.pk]),
        reverse("studio:batch-progress", args=[batch.pk]),
        reverse("studio:batch-cancel", args=[batch.pk]),
        reverse("studio:task-cancel", args=[task.pk]),
        reverse("studio:gallery"),
        reverse("studio:sets"),
        reverse("studio:set", args=[avatar_set.pk]),
        reverse("studio:set-publish", args=[avatar_set.pk]),
        reverse("studio:set-published", args=[avatar_set.pk]),
        reverse("studio:asset-thumb", args=[asset.pk, 256]),
        reverse("studio:asset-original", args=[asset.pk]),
    ]


def test_it_sends_an_anonymous_visitor_to_sign_in_from_every_page(client: Client, subject):
    batch = a_batch(subject, candidates=2)
    asset = stored_asset(1)
    avatar_set = engine.create_set(name="Family", asset_ids=[asset.pk])
    engine.publish(avatar_set=avatar_set)

    for url in every_route(subject, batch, asset, avatar_set):
        for method in (client.get, client.post):
            response = method(url)
            assert response.status_code == 302, url
            assert response["Location"].startswith(f"/accounts/login/?next={url}"), url
    assert Task.objects.filter(state=TaskState.CANCELLED).count() == 0
    assert AvatarSet.objects.get().version == avatar_set.version


def test_it_sends_a_poll_whose_session_expired_to_the_sign_in_page(client: Client, subject):
    batch = a_batch(subject, candidates=2)
    page = f"/batches/{batch.pk}/"

    response = client.get(
        f"{page}progress/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver{page}",
    )

    # Not a redirect that htmx would follow and swap into the page: a full navigation.
    assert response.status_code == 200
    there = f"/accounts/login/?next={page.replace('/', '%2F')}&signed_out=1"
    assert response["HX-Redirect"] == there
    assert not response.content
    # Found by a review: a live tab, signed out in another, landed there without a word.
    said = text(client.get(there))
    assert "You were signed out (in another tab, say, or after a long while)" in said, said
    assert "You were signed out" not in text(client.get(f"/accounts/login/?next={page}"))


def test_a_form_sent_after_the_sign_in_ended_is_said_not_done_and_leads_back_to_its_page(
    client: Client, subject, person: User
):
    batch = a_batch(subject, candidates=2)
    page = f"/batches/{batch.pk}/"
    asset = stored_asset(1)

    refused = client.post(
        "/sets/",
        {"assets": [asset.pk], "name": "Never made", "next": page},
        HTTP_REFERER=f"http://testserver{page}",
    )

    # Back to the batch's page, not to the address the form was sent to (the sets' list).
    assert refused.status_code == 302
    assert refused["Location"] == f"/accounts/login/?next={page}"
    sign_in_page = text(client.get(refused["Location"]))
    assert "You were signed out, so what you sent was not done" in sign_in_page
    assert "nothing was started or paid" in sign_in_page
    assert not AvatarSet.objects.exists()
    client.force_login(person)
    assert "You were signed out" not in text(client.get(page))  # said once


def test_a_form_sent_after_the_sign_in_ended_from_another_site_leads_to_its_own_address(
    client: Client, subject
):
    refused = client.post(
        f"/subjects/{subject.pk}/rename/",
        {"name": "Mallory"},
        HTTP_REFERER="https://elsewhere.example/subjects/",
    )

    assert refused["Location"] == f"/accounts/login/?next=/subjects/{subject.pk}/rename/"
    assert Subject.objects.get().name == subject.name


def test_the_batch_page_answering_the_form_says_once_that_its_draft_can_go(
    signed_in: Client, subject
):
    planned = signed_in.post("/batches/new/", batch_form(subject))
    page = planned["Location"]

    assert 'name="avatars-draft" content="planned"' in signed_in.get(page).content.decode()
    assert "avatars-draft" not in signed_in.get(page).content.decode()


def test_it_signs_a_person_in_and_out(client: Client, person: User):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert "Sign in" in text(page)

    wrong = client.post("/accounts/login/", {"username": "grace", "password": "nope"})
    assert "did not match" in text(wrong)

    assert page.status_code == 200 and "aria-invalid" not in page.content.decode()
    body = wrong.content.decode()
    assert re.search(r'role="alert" id="sign-in-error">Your username and password did not', body)
    for name in ("username", "password"):  # a screen reader hears which fields and why
        field = re.search(rf'<input[^>]*name="{name}"[^>]*>', body)
        assert field and 'aria-invalid="true"' in field.group(0), field
        assert 'aria-describedby="sign-in-error"' in field.group(0), field

    right = client.post(
        "/accounts/login/?next=/gallery/",
        {"username": "grace", "password": "not-a-real-password", "next": "/gallery/"},
    )
    assert right.status_code == 302 and right["Location"] == "/gallery/"
    assert client.get("/").status_code == 200

    out = client.post("/accounts/logout/", {"next": "/accounts/login/"}, follow=True)
    assert out.redirect_chain == [("/accounts/login/", 302)]
    assert messages_of(out) == ["You are signed out."]  # a shared device: said (a review)
    assert client.get("/").status_code == 302


def test_it_renders_every_page_for_a_signed_in_person(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    asset = stored_asset(1)
    avatar_set = engine.create_set(name="Family", asset_ids=[asset.pk])
    engine.publish(avatar_set=avatar_set)

    for name, args in [
        ("studio:home", []),
        ("studio:subjects", []),
        ("studio:subject", [subject.pk]),
        ("studio:batch-new", []),
        ("studio:batch", [batch.pk]),
        ("studio:batch-progress", [batch.pk]),
        ("studio:gallery", []),
        ("studio:sets", []),
        ("studio:set", [avatar_set.pk]),
        ("studio:set-published", [avatar_set.pk]),
    ]:
        response = signed_in.get(reverse(name, args=args))
        assert response.status_code == 200, name
    home = text(signed_in.get("/"))
    assert "Spring avatars" in home and "2 in progress" in home


def test_it_answers_404_for_what_does_not_exist(signed_in: Client):
    assert signed_in.get(f"/batches/{uuid.uuid4()}/").status_code == 404
    assert signed_in.get("/subjects/999999999999999999/").status_code == 404
    assert signed_in.get("/subjects/99999999999999999999999/").status_code == 404
    assert signed_in.get("/assets/1/thumb/256/v3/").status_code == 404


# --- the pages a person sees when something is wrong -----------------------------------


def test_a_missing_page_is_the_studios_own_with_its_navigation(signed_in: Client):
    """Not Django's bare "Not Found": the studio's page, its links and a way back."""
    response = signed_in.get(f"/batches/{uuid.uuid4()}/")

    assert response.status_code == 404
    page = text(response)
    assert "There is nothing at this address" in page
    assert "Back to the batches" in page and "New batch" in page


def test_an_upload_the_server_cannot_read_gets_the_studios_page(signed_in: Client, subject):
    """Two files in one upload are refused before the view runs (a bare 400 page once)."""
    two = [SimpleUploadedFile(f"p{i}.png", png_bytes(60 + i), "image/png") for i in range(2)]
    browser = Client(raise_request_exception=False)
    browser.cookies = signed_in.cookies

    response = browser.post(reverse("studio:subject", args=[subject.pk]), {"photo": two})

    assert response.status_code == 400
    assert "one photo at a time" in text(response)
    assert not Asset.objects.filter(file_name__in=["p0.png", "p1.png"]).exists()


def test_a_server_error_gets_the_studios_page_and_needs_no_database():
    with CaptureQueriesContext(connection) as queries:
        response = server_error(RequestFactory().get("/"))

    assert response.status_code == 500
    assert "Something went wrong here" in response.content.decode()
    assert len(queries) == 0
