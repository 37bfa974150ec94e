"""No bad id gives a 500: odd digits, huge, negative and very long ids answer 400 or 404."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from studio.api.auth import issue_token
from studio.models import AvatarSet, Batch
from tests.factories import a_batch

pytestmark = pytest.mark.django_db

DIGITS = "0123456789"
ARABIC_INDIC = "".join(chr(0x0660 + d) for d in range(10))
FULLWIDTH = "".join(chr(0xFF10 + d) for d in range(10))
# Each names a real row's id in a way no id is written: str.isdigit() accepts the first
# three, int() reads the Arabic-Indic and fullwidth forms as the very same number.
VARIANTS = {
    "superscript two": lambda pk: "\u00b2",
    "Arabic-Indic digits": lambda pk: str(pk).translate(str.maketrans(DIGITS, ARABIC_INDIC)),
    "fullwidth digits": lambda pk: str(pk).translate(str.maketrans(DIGITS, FULLWIDTH)),
    "past 64 bits": lambda pk: "9" * 20,
    "negative": lambda pk: f"-{pk}",
    "zero": lambda pk: "0",
    "300 digits": lambda pk: "1" * 300,
    "exponent": lambda pk: f"{pk}e0",
    "space before": lambda pk: f" {pk}",
    "space after": lambda pk: f"{pk} ",
    "leading zero": lambda pk: f"0{pk}",  # a review: "01" named row 1, one row by two names
}
BAD_IDS = [VARIANTS[name](1) for name in VARIANTS]
API_GETS = ["batches/{}", "tasks/{}", "assets/{}", "assets/{}/original", "sets/{}"]
API_POSTS = ["subjects/{}/references", "batches/{}/cancel", "tasks/{}/cancel"]
API_POSTS += ["tasks/{}/reconcile", "sets/{}/publish"]
PAGES = ["/subjects/{}/", "/sets/{}/", "/assets/{}/original/", "/batches/{}/"]


@pytest.fixture
def staff() -> User:
    return User.objects.create_superuser("ada", password="correct horse battery")


@pytest.fixture
def browser(staff) -> Client:
    # A real server answers an unexpected exception with 500; so does this client.
    client = Client(raise_request_exception=False)
    client.force_login(staff)
    return client


def api_error(response) -> tuple[int, str]:
    body = response.json()
    return response.status_code, body["error"]["code"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_api_routes_answer_a_bad_id_with_a_json_404(browser, staff, subject, variant):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {issue_token(user=staff)}"}
    photo = subject.assets.get()
    chosen = AvatarSet.objects.create(name="Favourites")
    # Each route gets a bad spelling of a row that exists: finding it would be a bug too.
    existing = {"subjects": subject.pk, "assets": photo.pk, "sets": chosen.pk}
    bad = VARIANTS[variant]
    answers = []
    for method, paths in (("get", API_GETS), ("post", API_POSTS)):
        for path in paths:
            url = f"/api/v1/{path.format(bad(existing.get(path.split('/')[0], 1)))}"
            answers.append((url, getattr(browser, method)(url, **auth)))

    for url, response in answers:
        assert response.status_code in (400, 404), (url, response.status_code)
        assert api_error(response)[0] in (400, 404)


# Django reads each of these as the batch's or task's UUID (a review): more names for one row.
UUID_SPELLINGS = {
    "upper case": str.upper,
    "no dashes": lambda pk: pk.replace("-", ""),
    "braces": lambda pk: f"{{{pk}}}",
    "a URN": lambda pk: f"urn:uuid:{pk}",
}


@pytest.mark.parametrize("spelling", list(UUID_SPELLINGS))
def test_a_batch_or_task_is_found_by_its_own_id_only(browser, staff, subject, spelling):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {issue_token(user=staff)}"}
    batch = a_batch(subject)
    task = batch.tasks.get()
    urls = [f"batches/{batch.pk}", f"tasks/{task.pk}"]
    assert [browser.get(f"/api/v1/{url}", **auth).status_code for url in urls] == [200, 200]
    respell = UUID_SPELLINGS[spelling]

    answers = {
        path: (browser.get if method == "get" else browser.post)(f"/api/v1/{path}", **auth)
        for method, path in [
            ("get", f"batches/{respell(str(batch.pk))}"),
            ("get", f"tasks/{respell(str(task.pk))}"),
            ("post", f"tasks/{respell(str(task.pk))}/cancel"),
            ("post", f"batches/{respell(str(batch.pk))}/cancel"),
        ]
    }

    assert {path: api_error(answer) for path, answer in answers.items()} == {
        path: (404, "not_found") for path in answers
    }
    assert batch.tasks.get().state == "queued"  # no cancel went through


@pytest.mark.parametrize("bad", BAD_IDS)
def test_ids_inside_api_bodies_answer_400(browser, staff, subject, bad):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {issue_token(user=staff)}"}
    bodies = [
        ("batches", {"prompt": "p", "subjects": [bad], "providers": [{"provider": "openai"}]}),
        (
            "batches",
            {
                "prompt": "p",
                "subjects": [subject.pk],
                "references": [bad],
                "providers": [{"provider": "openai"}],
            },
        ),
        ("sets", {"name": "Favourites", "assets": [bad]}),
    ]
    for path, body in bodies:
        response = browser.post(
            f"/api/v1/{path}", json.dumps(body), content_type="application/json", **auth
        )
        assert api_error(response) == (400, "invalid_request"), (path, bad, response.content)
    assert not Batch.objects.exists() and not AvatarSet.objects.exists()


@pytest.mark.parametrize("bad", BAD_IDS)
def test_studio_pages_and_forms_answer_a_bad_id_without_a_500(browser, subject, bad):
    pages = [browser.get(p.format(bad)) for p in PAGES]
    batch = browser.post(
        "/batches/new/",
        {"prompt": "p", "subjects": [bad], "references": [bad], "candidates_openai": "1"},
    )
    chosen = browser.post("/sets/", {"name": "Favourites", "assets": [bad]})

    assert all(page.status_code == 404 for page in pages), [p.status_code for p in pages]
    assert batch.status_code in (200, 400), batch.status_code  # the form again, with errors
    assert chosen.status_code in (200, 400, 302), chosen.status_code
    assert not Batch.objects.exists() and not AvatarSet.objects.filter(items__isnull=False).exists()


# Text no database column can hold: PostgreSQL refuses NUL in text, and a lone surrogate
# cannot be encoded as UTF-8 by either database. (Found by the API fuzzer on PostgreSQL.)
UNSTORABLE = {"NUL": "Ada\u0000", "lone surrogate": "Ada\ud8ce"}


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_text_no_database_can_store_is_a_400_not_a_500(browser, staff, subject, kind):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {issue_token(user=staff)}"}
    text = UNSTORABLE[kind]
    bodies = [
        ("subjects", {"name": text}),
        ("sets", {"name": text, "assets": []}),
        (
            "batches",
            {"prompt": text, "subjects": [subject.pk], "providers": [{"provider": "openai"}]},
        ),
        (
            "batches",
            {
                "prompt": "p",
                "title": text,
                "subjects": [subject.pk],
                "providers": [{"provider": "openai"}],
            },
        ),
        (
            "batches",
            {
                "prompt": "p",
                "subjects": [subject.pk],
                text: 1,
                "providers": [{"provider": "openai"}],
            },
        ),
    ]
    for path, body in bodies:
        raw = json.dumps(body)  # escapes both, as a client's JSON would
        response = browser.post(f"/api/v1/{path}", raw, content_type="application/json", **auth)
        assert api_error(response)[0] == 400, (path, kind, response.status_code)
    assert not Batch.objects.exists() and not AvatarSet.objects.exists()
