"""The Ember client never puts an unsafe id Ember names into a URL path (docs/ember.md)."""

import pytest
import respx

from studio.ember.client import (
    EmberBadAnswer,
)
from tests.ember_client.calls import JOBS, PAYLOAD, RESULT, call, ember_error

# --- ids that go into a URL path ------------------------------------------------------

# Ids Ember might name that would point a request at another route, or that no id of
# Ember's looks like; each must be refused before it reaches a URL path.
UNSAFE_IDS = {
    "parent": "../x",
    "climbing out of the route": "img_1/../../history",
    "a slash": "img/1",
    "two dots inside": "img..1",
    "a leading dot": ".hidden",
    "a query": "img_1?source_app=other",
    "a fragment": "img_1#x",
    "percent-encoded": "img%2F..%2Fhistory",
    "a backslash": "img\\1",
    "a space": "img 1",
    "a trailing newline": "img_1\n",
    "empty": "",
    "too long": "a" * 129,
    # Over the 120 characters a job's or image's column holds: on PostgreSQL a 125-character
    # job id once could not be recorded, and its paid original could never be collected.
    "longer than its column": "a" * 121,
    "a non-ASCII digit": "img_\u0661",
}
SAFE_IDS = ["job_1", "img_01HZX:abc-1.v2", "7", "A" * 120]


@pytest.fixture
def everything(ember: respx.Router) -> respx.Route:
    """Answer 404 to any request no test route claims, so every request is on record."""
    return ember.route().respond(404, json=ember_error("not_found", "No such route."))


@pytest.mark.parametrize("job_id", UNSAFE_IDS.values(), ids=UNSAFE_IDS.keys())
def test_it_refuses_a_202_naming_an_unsafe_job_id_as_an_answer_that_may_have_arrived(ember, job_id):
    ember.post(JOBS).respond(202, json={"id": job_id, "status": "queued"})

    with pytest.raises(EmberBadAnswer) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is True  # Ember took *something*: maybe paid
    assert ascii(job_id)[:40] in failed.value.message  # the refused id, escaped


@pytest.mark.parametrize("bad_id", UNSAFE_IDS.values(), ids=UNSAFE_IDS.keys())
@pytest.mark.parametrize("method", ["poll", "fetch"])
def test_it_refuses_to_put_an_unsafe_id_in_a_url_and_sends_nothing(
    ember, everything, method, bad_id
):
    with pytest.raises(EmberBadAnswer) as failed:
        call(method, bad_id)

    assert ember.calls.call_count == 0, [c.request.url for c in ember.calls]
    assert ascii(bad_id)[:40] in failed.value.message


@pytest.mark.parametrize("bad_id", UNSAFE_IDS.values(), ids=UNSAFE_IDS.keys())
def test_it_does_not_release_an_unsafe_image_id_and_sends_nothing(ember, everything, bad_id):
    assert call("release", bad_id) is False

    assert ember.calls.call_count == 0, [c.request.url for c in ember.calls]


@pytest.mark.parametrize("image_id", UNSAFE_IDS.values(), ids=UNSAFE_IDS.keys())
def test_it_refuses_a_succeeded_result_naming_an_unsafe_image_id(ember, image_id):
    result = {**RESULT, "image": {**RESULT["image"], "id": image_id}}
    ember.get(f"{JOBS}/job_1").respond(
        200, json={"id": "job_1", "status": "succeeded", "result": result}
    )

    with pytest.raises(EmberBadAnswer) as failed:
        call("poll", "job_1")

    assert ascii(image_id)[:40] in failed.value.message


@pytest.mark.parametrize("safe_id", SAFE_IDS)
def test_it_uses_ids_of_the_safe_shape_as_they_are(ember, safe_id):
    ember.post(JOBS).respond(202, json={"id": safe_id, "status": "queued"})
    result = {**RESULT, "image": {**RESULT["image"], "id": safe_id}}
    poll = ember.get(f"{JOBS}/{safe_id}").respond(
        200, json={"id": safe_id, "status": "succeeded", "result": result}
    )
    release = ember.patch(f"/api/v1/explorations/{safe_id}/protection").respond(200, json={})

    assert call("submit", PAYLOAD).job_id == safe_id
    assert call("poll", safe_id).result == result
    assert call("release", safe_id) is True
    assert (poll.call_count, release.call_count) == (1, 1)


def test_it_shows_a_refused_id_escaped_and_cut_short(ember):
    job_id = "../" * 200 + "\u202e\n<script>"
    ember.post(JOBS).respond(202, json={"id": job_id, "status": "queued"})

    with pytest.raises(EmberBadAnswer) as failed:
        call("submit", PAYLOAD)

    message = failed.value.message
    assert "'../../../" in message
    assert "\u202e" not in message and "\n" not in message and "<script>" not in message
    assert len(message) < 80 + 120, f"{len(message)} characters: the id is cut to about 80"
