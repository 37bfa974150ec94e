"""A refusal quotes at most 100 characters of a value it could not use, whatever its size.

Found by a review over uvicorn: a batch naming the subject 10**4000 (4001 digits in the
JSON) was told "Unknown subject: 1000…" with every digit, and `GET /sets/<9000 digits>`
answered a 404 of about 9020 characters.
"""

import pytest

from tests.api.calls import API, error, post_json

pytestmark = pytest.mark.django_db

HUGE = {
    "a 4001-digit number": 10**4000,
    "9000 digits": "9" * 9000,
    "9000 letters": "a" * 9000,
}
# A sentence around a quote of at most 100 characters; the longest is an unknown model's.
SHORT_ENOUGH = 200  # characters


def batch(subject, **fields) -> dict:
    """A batch request that would be planned, but for `fields`."""
    return {"prompt": "p", "subjects": [subject.pk], "providers": [{"provider": "openai"}]} | fields


# Every field of a body whose refusal quotes the value the caller put there.
BODIES = {
    "a batch's subjects": lambda subject, v: ("batches", batch(subject, subjects=[v])),
    "a batch's references": lambda subject, v: ("batches", batch(subject, references=[v])),
    "a batch's provider": lambda subject, v: (
        "batches",
        batch(subject, providers=[{"provider": v}]),
    ),
    "a provider's model": lambda subject, v: (
        "batches",
        batch(subject, providers=[{"provider": "openai", "model": v}]),
    ),
    "a batch's frames": lambda subject, v: ("batches", batch(subject, frames=[v])),
    "a set's assets": lambda subject, v: ("sets", {"name": "Favourites", "assets": [v]}),
}
# Every route with an id in its path.
PATHS = [
    ("get", "batches/{}"),
    ("get", "tasks/{}"),
    ("get", "assets/{}"),
    ("get", "assets/{}/original"),
    ("get", "sets/{}"),
    ("post", "subjects/{}/references"),
    ("post", "batches/{}/cancel"),
    ("post", "tasks/{}/cancel"),
    ("post", "tasks/{}/reconcile"),
    ("post", "sets/{}/publish"),
]


@pytest.mark.parametrize("value", list(HUGE))
@pytest.mark.parametrize("field", list(BODIES))
def test_it_quotes_a_huge_value_in_a_body_cut_to_100_characters(staff_api, subject, field, value):
    path, body = BODIES[field](subject, HUGE[value])

    response = post_json(staff_api, f"{API}/{path}", body)

    assert response.status_code == 400
    message = error(response)["message"]
    assert len(message) <= SHORT_ENOUGH, message[:300]


@pytest.mark.parametrize("value", ["9" * 9000, "a" * 9000])
@pytest.mark.parametrize(("method", "path"), PATHS)
def test_it_quotes_a_huge_id_in_a_path_cut_to_100_characters(staff_api, method, path, value):
    response = getattr(staff_api, method)(f"{API}/{path.format(value)}")

    assert response.status_code == 404
    message = error(response)["message"]
    assert len(message) <= SHORT_ENOUGH, message[:300]


def test_it_takes_a_number_of_thousands_of_digits_for_no_id_as_it_takes_such_text(api, subject):
    response = post_json(api, f"{API}/batches", batch(subject, subjects=[10**4000]))

    assert error(response)["message"] == f"Subjects must be a list of ids; 1{'0' * 98}… is not one."


def test_it_names_a_set_it_does_not_have_by_the_id_cut_to_100_characters(api):
    response = api.get(f"{API}/sets/{'a' * 9000}")

    assert error(response) == {
        "code": "not_found",
        "message": f'No avatar set with id "{"a" * 98}….',
    }


def test_it_still_quotes_a_short_unknown_id_whole(api, subject):
    response = post_json(api, f"{API}/sets", {"name": "Favourites", "assets": [987654321]})

    assert error(response)["message"] == "Unknown asset: 987654321."


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "null"),
        (True, "true"),
        ([], "[]"),
        ({}, "{}"),
        ("ada", '"ada"'),
        ("Zoë", '"Zoë"'),
        ("a\u202eb", '"a\\u202eb"'),
    ],
)
def test_it_says_a_value_back_as_json_writes_it(api, subject, value, said):
    """Found by a review over uvicorn: "None is not one.", "Unknown frame: True." (Python's
    words for JSON's null and true) and a direction override quoted raw, which reordered
    the rest of the sentence on screen."""
    for path, body, sentence in [
        ("batches", batch(subject, subjects=[value]), f"Subjects must be a list of ids; {said}"),
        ("batches", batch(subject, frames=[value]), f"Unknown frame: {said}. Frames are"),
    ]:
        response = post_json(api, f"{API}/{path}", body)

        assert response.status_code == 400
        assert error(response)["message"].startswith(sentence), error(response)["message"]


@pytest.mark.parametrize(("given", "said"), [("%00", '"\\u0000"'), ("%E2%80%8F1", '"\\u200f1"')])
def test_it_says_an_id_in_a_path_that_does_not_show_as_its_escape(api, given, said):
    response = api.get(f"{API}/tasks/{given}")

    assert response.status_code == 404
    assert error(response)["message"] == f"No task with id {said}.", error(response)["message"]
