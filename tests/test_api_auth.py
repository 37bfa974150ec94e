"""API tokens (docs/api.md): who gets in, what a stranger learns, how tokens are kept."""

import hashlib
import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone

from studio import engine
from studio.api.auth import issue_token
from studio.models import ApiToken, Asset, AvatarSet, Batch, SetItem, Subject, Task
from tests.factories import a_batch, batch_request, png_bytes

pytestmark = pytest.mark.django_db

API = "/api/v1"
UNAUTHORIZED = {"error": {"code": "unauthorized", "message": "A valid API token is required."}}


def bearing(token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token}"})


def new_token(username: str = "family-script", **fields: Any) -> str:
    return issue_token(user=User.objects.create_user(username, **fields))


def last_line(output: str) -> str:
    return output.rstrip("\n").splitlines()[-1]


# --- a request without a valid token ----------------------------------------------


@pytest.fixture
def world(subject) -> dict[str, Any]:
    """One of everything, so each route would have something to act on."""
    batch = a_batch(subject)
    chosen = engine.create_set(name="Family 2026", asset_ids=[subject.assets.get().pk])
    return {
        "subject": subject,
        "batch": batch,
        "task": batch.tasks.get(),
        "asset": subject.assets.get(),
        "set": chosen,
    }


def everything(world: dict[str, Any]) -> dict[str, Any]:
    """What a request could have changed: row counts, task states, publication."""
    return {
        "counts": [m.objects.count() for m in (Subject, Asset, Batch, Task, AvatarSet, SetItem)],
        "states": list(Task.objects.values_list("pk", "state", "version")),
        "published": AvatarSet.objects.get(pk=world["set"].pk).published_at,
    }


ROUTES = [
    ("get", "subjects", None),
    ("post", "subjects", {"name": "Eve"}),
    ("post", "subjects/{subject}/references", "upload"),
    ("post", "batches", "batch"),
    ("get", "batches/{batch}", None),
    ("post", "batches/{batch}/cancel", None),
    ("get", "tasks/{task}", None),
    ("post", "tasks/{task}/cancel", None),
    ("post", "tasks/{task}/reconcile", None),
    ("get", "assets/{asset}", None),
    ("get", "assets/{asset}/original", None),
    ("post", "sets", {"name": "Another set", "assets": []}),
    ("get", "sets/{set}", None),
    ("post", "sets/{set}/publish", None),
    ("delete", "subjects", None),  # a method the route does not take: still only 401
    ("get", "no-such-route", None),  # a path the API does not have: still only 401
]

HEADERS = {
    "missing": lambda token: None,
    "wrong": lambda token: f"Bearer {'x' * len(token)}",
    "other-scheme": lambda token: f"Token {token}",
    "no-scheme": lambda token: token,
    "empty-bearer": lambda token: "Bearer ",
    "extra-words": lambda token: f"Bearer {token} please",
}


def send(client: Client, method: str, url: str, body: object, world: dict[str, Any]) -> Any:
    if body == "upload":
        file = SimpleUploadedFile("eve.png", png_bytes(5), content_type="image/png")
        return client.post(url, {"file": file})
    if body == "batch":
        body = batch_request(world["subject"])
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("header", list(HEADERS))
@pytest.mark.parametrize(
    ("method", "route", "body"), ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES]
)
def test_it_answers_401_and_nothing_else_without_a_valid_token(
    world, data_dir, header, method, route, body
):
    token = new_token("ops", is_staff=True)  # a real token exists, but is not presented right
    authorization = HEADERS[header](token)
    client = Client(headers={"Authorization": authorization} if authorization is not None else {})
    before = everything(world)
    files = sorted(p.name for p in (data_dir / "originals").iterdir())

    response = send(client, method, f"{API}/{route.format(**world)}", body, world)

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED
    assert "Allow" not in response
    assert everything(world) == before
    assert sorted(p.name for p in (data_dir / "originals").iterdir()) == files


def test_it_refuses_the_token_of_a_deactivated_user(world):
    token = new_token()
    User.objects.filter(username="family-script").update(is_active=False)

    response = bearing(token).get(f"{API}/subjects")

    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


def test_it_does_not_let_a_signed_in_browser_in_without_a_token(client, world):
    client.force_login(User.objects.create_user("ada", is_staff=True))

    response = client.get(f"{API}/subjects")

    assert response.status_code == 401


def test_it_takes_a_token_on_a_post_without_any_csrf_token(subject):
    client = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {new_token()}"})

    response = client.post(f"{API}/subjects", {"name": "Eve"}, content_type="application/json")

    assert response.status_code == 201


def test_it_accepts_the_scheme_in_any_case(db):
    token = new_token()

    response = Client(headers={"Authorization": f"bearer {token}"}).get(f"{API}/subjects")

    assert response.status_code == 200


def test_it_accepts_more_than_one_space_after_the_scheme(db):
    """Found by a review: RFC 7235 allows one or more; two were a 401."""
    token = new_token()

    response = Client(headers={"Authorization": f"Bearer   {token}"}).get(f"{API}/subjects")

    assert response.status_code == 200


# --- how tokens are kept --------------------------------------------------------


def test_it_stores_a_token_only_as_its_sha256(db):
    token = new_token()

    row = ApiToken.objects.get()
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')
            assert token not in repr(cursor.fetchall()), table


def test_it_issues_a_different_token_each_time_and_each_works(db):
    user = User.objects.create_user("family-script")
    first, second = issue_token(user=user), issue_token(user=user)

    assert first != second
    assert bearing(first).get(f"{API}/subjects").status_code == 200
    assert bearing(second).get(f"{API}/subjects").status_code == 200


def test_it_records_when_a_token_was_last_used_at_most_once_a_minute(db):
    client = bearing(new_token())
    assert ApiToken.objects.get().last_used_at is None

    client.get(f"{API}/subjects")
    first_use = ApiToken.objects.get().last_used_at
    assert first_use is not None

    client.get(f"{API}/subjects")
    assert ApiToken.objects.get().last_used_at == first_use  # no write for every request

    ApiToken.objects.update(last_used_at=timezone.now() - timedelta(minutes=2))
    client.get(f"{API}/subjects")
    assert ApiToken.objects.get().last_used_at > first_use


@pytest.mark.django_db(transaction=True)  # a request's writes are in autocommit, as served
def test_a_read_is_answered_when_noting_the_tokens_use_fails(caplog):
    """Found by a full-disk review: the once-a-minute note of a token's use failed every API
    call, reads included, while the studio's pages still answered."""
    client = bearing(new_token())

    def full_disk(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if sql.lstrip().upper().startswith("UPDATE") and "apitoken" in sql.lower():
            raise OperationalError("database or disk is full")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(full_disk):
        response = client.get(f"{API}/subjects")

    assert response.status_code == 200, response.content
    assert ApiToken.objects.get().last_used_at is None  # noted at a later use
    assert "when it was last used could not be noted: database or disk is full" in caplog.text


# --- manage.py api_token --------------------------------------------------------


def test_it_prints_a_working_token_as_the_last_line_of_the_command(db):
    User.objects.create_user("family-script")
    out = StringIO()

    call_command("api_token", "family-script", stdout=out)

    token = last_line(out.getvalue())
    response = bearing(token).post(
        f"{API}/subjects", {"name": "Eve"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert ApiToken.objects.get().user.username == "family-script"


def test_it_creates_the_user_when_asked_and_the_token_works(db):
    out = StringIO()

    call_command("api_token", "sibling-app", "--create-user", stdout=out)

    user = User.objects.get(username="sibling-app")
    assert not user.has_usable_password()
    assert bearing(last_line(out.getvalue())).get(f"{API}/subjects").status_code == 200


@pytest.mark.parametrize("username", ["bad user", "u" * 151, ""])
def test_it_creates_no_user_django_would_refuse_the_name_of(db, username):
    """Found by a review: "bad user" and a 200-character name were created silently."""
    with pytest.raises(CommandError, match="Not a username: "):
        call_command("api_token", username, "--create-user", stdout=StringIO())

    assert not User.objects.exists()
    assert not ApiToken.objects.exists()


def test_it_issues_no_token_for_a_user_who_is_not_active(db):
    """Found by a review: the token was printed, and answered 401 at once."""
    User.objects.create_user(username="newbie", is_active=False)

    with pytest.raises(CommandError, match="The user newbie is not active"):
        call_command("api_token", "newbie", stdout=StringIO())

    assert not ApiToken.objects.exists()


def test_it_refuses_an_unknown_user_without_create_user_and_creates_nothing(db):
    with pytest.raises(CommandError, match="Unknown user: nobody"):
        call_command("api_token", "nobody", stdout=StringIO())

    assert not User.objects.exists()
    assert not ApiToken.objects.exists()


# --- scopes: read-only tokens -----------------------------------------------------

READ_ONLY = {
    "code": "read_only",
    "message": "This API token may only read; ask for a token without --read-only to change "
    "anything.",
}
WRITES = [route for route in ROUTES if route[0] == "post"]
READS = [route for route in ROUTES if route[0] == "get" and route[1] != "no-such-route"]


def read_only_token(username: str = "dashboard", **fields: Any) -> str:
    return issue_token(user=User.objects.create_user(username, **fields), read_only=True)


@pytest.mark.parametrize(("method", "route", "body"), WRITES, ids=[r for _, r, _ in WRITES])
def test_it_refuses_every_write_to_a_read_only_token_and_changes_nothing(
    world, data_dir, method, route, body
):
    # Staff with every permission: only the token's scope stands in the way.
    client = bearing(read_only_token(is_staff=True, is_superuser=True))
    ids = {name: row.pk for name, row in world.items()}
    before = everything(world)
    files = sorted(p.name for p in (data_dir / "originals").iterdir())

    response = send(client, method, f"{API}/{route.format(**ids)}", body, world)

    assert response.status_code == 403
    assert response.json() == {"error": READ_ONLY}
    assert everything(world) == before
    assert sorted(p.name for p in (data_dir / "originals").iterdir()) == files


@pytest.mark.parametrize(("method", "route", "body"), READS, ids=[r for _, r, _ in READS])
def test_it_lets_a_read_only_token_read_every_route(world, method, route, body):
    client = bearing(read_only_token())
    ids = {name: row.pk for name, row in world.items()}

    response = send(client, method, f"{API}/{route.format(**ids)}", body, world)

    assert response.status_code == 200


def test_it_answers_405_not_403_to_a_read_only_token_for_a_method_a_route_does_not_take(world):
    response = bearing(read_only_token()).delete(f"{API}/subjects")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert Subject.objects.count() == 1


def test_it_prints_a_read_only_token_when_asked(world):
    User.objects.create_user("dashboard")
    out = StringIO()

    call_command("api_token", "dashboard", "--read-only", stdout=out)

    client = bearing(last_line(out.getvalue()))
    assert "read-only" in out.getvalue()
    assert client.get(f"{API}/subjects").status_code == 200
    refused = client.post(f"{API}/subjects", {"name": "Eve"}, content_type="application/json")
    assert (refused.status_code, refused.json()) == (403, {"error": READ_ONLY})
    assert not Subject.objects.filter(name="Eve").exists()


def test_it_still_issues_tokens_that_may_write_by_default(world):
    User.objects.create_user("family-script")
    out = StringIO()

    call_command("api_token", "family-script", stdout=out)

    response = bearing(last_line(out.getvalue())).post(
        f"{API}/subjects", {"name": "Eve"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert ApiToken.objects.get().scope == ApiToken.Scope.READ_WRITE
