"""The API's OpenAPI document (docs/api.md): generated from the code, served to its callers."""

import json
import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from studio.api.auth import issue_token
from studio.api.door import methods_taken

pytestmark = pytest.mark.django_db

DOCUMENT = "/api/v1/openapi.json"
DOCS = "/api/v1/docs"
# docs/api.md's table: every route and the methods it takes.
ROUTES = {
    "/api/v1/subjects": {"get", "post"},
    "/api/v1/subjects/{subject_id}/references": {"post"},
    "/api/v1/batches": {"post"},
    "/api/v1/batches/{batch_id}": {"get"},
    "/api/v1/batches/{batch_id}/cancel": {"post"},
    "/api/v1/tasks/{task_id}": {"get"},
    "/api/v1/tasks/{task_id}/cancel": {"post"},
    "/api/v1/tasks/{task_id}/reconcile": {"post"},
    "/api/v1/assets/{asset_id}": {"get"},
    "/api/v1/assets/{asset_id}/original": {"get"},
    "/api/v1/sets": {"post"},
    "/api/v1/sets/{set_id}": {"get"},
    "/api/v1/sets/{set_id}/publish": {"post"},
}
SUCCESS = {
    ("post", "/api/v1/subjects"): "201",
    ("post", "/api/v1/subjects/{subject_id}/references"): "201",
    ("post", "/api/v1/batches"): "202",
    ("post", "/api/v1/sets"): "201",
}


def bearing(token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token}"})


def document() -> dict:
    response = bearing(issue_token(user=User.objects.create_user("script"), read_only=True)).get(
        DOCUMENT
    )
    assert response.status_code == 200
    return response.json()


def test_it_serves_an_openapi_3_1_document_of_every_route_to_a_token(db):
    served = document()

    assert served["openapi"].startswith("3.1")
    assert {path: set(ops) for path, ops in served["paths"].items()} == ROUTES


def test_it_documents_each_routes_success_status_and_the_error_shape(db):
    served = document()

    for path, methods in ROUTES.items():
        for method in methods:
            responses = served["paths"][path][method]["responses"]
            assert SUCCESS.get((method, path), "200") in responses, (method, path)
            unauthorized = responses["401"]["content"]["application/json"]["schema"]
            assert unauthorized == {"$ref": "#/components/schemas/ErrorOut"}, (method, path)
    error = served["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"code", "message"}


def test_it_documents_what_any_route_may_answer_before_its_view_runs(db):
    """Found by a review: 405, 408, 413, a foreign host's 400 and the upload's 411 were
    answered but not in the document, which says every answer is one it states."""
    served = document()

    for path, methods in ROUTES.items():
        for method in methods:
            stated = set(served["paths"][path][method]["responses"])
            missing = {"400", "401", "405", "408", "413"} - stated
            assert not missing, (method, path, missing)
    upload = served["paths"]["/api/v1/subjects/{subject_id}/references"]["post"]
    assert "411" in upload["responses"]
    for path in ("/api/v1/subjects", "/api/v1/batches", "/api/v1/sets"):  # a JSON body's
        assert "415" in served["paths"][path]["post"]["responses"], path


def test_it_documents_the_bearer_token_and_the_upload_field(db):
    served = document()

    schemes = served["components"]["securitySchemes"]
    assert [(s["type"], s["scheme"]) for s in schemes.values()] == [("http", "bearer")]
    upload = served["paths"]["/api/v1/subjects/{subject_id}/references"]["post"]["requestBody"]
    form = upload["content"]["multipart/form-data"]["schema"]
    # Required and a file: it was documented optional and nullable, and refused when absent.
    assert form["properties"]["file"] == {"type": "string", "format": "binary"}, form
    assert form["required"] == ["file"], form


def test_it_documents_as_nullable_the_batch_fields_it_takes_as_null(db):
    """Found by a review's Schemathesis run: null was taken for these (as if left out) where
    the document allowed no null."""
    served = document()["components"]["schemas"]
    batch = served["BatchIn"]["properties"]
    provider = batch["providers"]["items"]["properties"]

    for name, field in [
        *((n, batch[n]) for n in ("title", "references", "frames")),
        ("model", provider["model"]),
    ]:
        assert {"type": "null"} in field.get("anyOf", []), (name, field)
    assert {"type": "null"} not in batch["prompt"].get("anyOf", []), batch["prompt"]


def test_it_answers_401_for_the_document_without_a_token(db):
    response = Client().get(DOCUMENT)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_it_serves_the_document_to_signed_in_staff_for_the_docs_page(client):
    client.force_login(User.objects.create_user("ada", is_staff=True))

    assert client.get(DOCUMENT).status_code == 200


def test_it_shows_the_interactive_docs_to_signed_in_staff(client):
    client.force_login(User.objects.create_user("ada", is_staff=True))

    response = client.get(DOCS)

    assert response.status_code == 200
    assert DOCUMENT in response.content.decode()


@pytest.mark.parametrize("who", ["anonymous", "signed-in non-staff", "token"])
def test_it_sends_anyone_but_signed_in_staff_from_the_docs_to_the_sign_in_page(db, who):
    client = Client()
    if who == "signed-in non-staff":
        client.force_login(User.objects.create_user("bob"))
    if who == "token":
        client = bearing(issue_token(user=User.objects.create_user("ops", is_staff=True)))

    response = client.get(DOCS)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("route", ["subjects", "batches", "sets"])
def test_it_answers_an_empty_body_with_the_apis_400_not_ninjas_422(db, route):
    client = bearing(issue_token(user=User.objects.create_user("script")))

    response = client.post(f"/api/v1/{route}", b"", content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "error": {"code": "invalid_json", "message": "The request body is not valid JSON."}
    }


def test_it_answers_405_to_a_write_to_the_document(db):
    client = bearing(issue_token(user=User.objects.create_user("script")))

    response = client.post(DOCUMENT, "{}", content_type="application/json")

    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", [DOCUMENT, DOCS])
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_it_answers_a_write_to_the_document_or_docs_without_a_token_with_401(db, path, method):
    """Found by a review: a real server answered Django's HTML page about a form's CSRF token."""
    client = Client(enforce_csrf_checks=True)  # as any client but Django's test client is

    response = getattr(client, method)(path, "{}", content_type="application/json")

    assert response.status_code == 401
    assert response.json() == {
        "error": {"code": "unauthorized", "message": "A valid API token is required."}
    }


@pytest.mark.parametrize("path", [DOCUMENT, DOCS])
@pytest.mark.parametrize("who", ["token", "signed-in staff"])
def test_it_answers_a_write_to_the_document_or_docs_with_405_to_its_readers(db, path, who):
    if who == "token":
        token = issue_token(user=User.objects.create_user("script"))
        client = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {token}"})
    else:
        client = Client(enforce_csrf_checks=True)
        client.force_login(User.objects.create_user("ada", is_staff=True))

    response = client.post(path, "{}", content_type="application/json")

    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_it_documents_the_idempotency_key_and_the_batchs_location(db):
    batches = document()["paths"]["/api/v1/batches"]["post"]

    assert [(p["name"], p["in"]) for p in batches["parameters"]] == [("Idempotency-Key", "header")]
    assert batches["parameters"][0]["schema"]["maxLength"] == 200
    assert "Location" in batches["responses"]["202"]["headers"]


def test_it_states_any_other_ninja_validation_error_as_a_400_in_the_apis_shape(db):
    from ninja.errors import ValidationError

    from studio.api.views import api

    refused = api.on_exception(
        None,  # type: ignore[arg-type]
        ValidationError([{"loc": ("query", "cursor"), "msg": "Input should be a valid string"}]),
    )

    assert refused.status_code == 400
    message = "query.cursor: Input should be a valid string"
    assert json.loads(refused.content) == {"error": {"code": "invalid_request", "message": message}}


def concrete(path: str) -> str:
    """Fill a documented path's parameters with values its route's converters take."""
    for value in ("1", str(uuid.uuid4())):
        filled = re.sub(r"\{[^}]+\}", value, path)
        if methods_taken(filled):
            return filled
    return re.sub(r"\{[^}]+\}", "1", path)


def test_the_door_knows_every_documented_method_of_every_route(db):
    """The ASGI door answers 404 and 405 before reading a body (avatars/bodylimit.py) from
    what each route says it takes: a route or method it did not know would be refused."""
    for path, operations in document()["paths"].items():
        taken = methods_taken(concrete(path))
        documented = {method.upper() for method in operations}
        assert documented <= taken, f"{path}: documented {documented}, the door knows {taken}"
        assert ("HEAD" in taken) == ("GET" in taken), f"{path}: HEAD wherever GET, {taken}"
