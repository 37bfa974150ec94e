"""The Ember client's poll, fetch, release and history calls (docs/ember.md)."""

import hashlib
import json

import httpx
import pytest

from studio.ember.client import (
    EmberBadAnswer,
    EmberError,
    EmberNotFound,
    Job,
)
from tests.ember_client.calls import JOBS, PAYLOAD, RESULT, TASK_ID, call, ember_error
from tests.factories import png_bytes

# --- poll ---------------------------------------------------------------------


def test_it_reads_a_succeeded_job_with_its_result(ember):
    ember.get(f"{JOBS}/job_1").respond(
        200, json={"id": "job_1", "status": "succeeded", "result": RESULT}
    )

    job = call("poll", "job_1")

    assert job == Job(id="job_1", status="succeeded", result=RESULT, error="")


@pytest.mark.parametrize("status", ["queued", "running"])
def test_it_reads_a_job_still_in_progress(ember, status):
    ember.get(f"{JOBS}/job_1").respond(200, json={"id": "job_1", "status": status})

    job = call("poll", "job_1")

    assert (job.status, job.result, job.error) == (status, None, "")


def test_it_reads_a_failed_job_with_embers_message(ember):
    ember.get(f"{JOBS}/job_1").respond(
        200,
        json={
            "id": "job_1",
            "status": "failed",
            "error": ember_error("provider_error", "The provider refused the prompt.")["error"],
        },
    )

    job = call("poll", "job_1")

    assert job.status == "failed"
    assert job.error == "The provider refused the prompt."


def test_it_reports_a_job_ember_does_not_know_as_not_found(ember):
    ember.get(f"{JOBS}/job_404").respond(404, json=ember_error("not_found", "No such job."))

    with pytest.raises(EmberNotFound) as failed:
        call("poll", "job_404")

    assert failed.value.message == "No such job."


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, json={"id": "job_1", "status": "exploded"}),
        httpx.Response(200, json={"id": "job_1"}),
        httpx.Response(200, text='{"id": "job_1", "status": '),
        httpx.Response(200, text="<html>maintenance</html>"),
        httpx.Response(200, json={"id": "job_1", "status": "succeeded"}),
        httpx.Response(200, json={"id": "job_1", "status": "succeeded", "result": {"image": {}}}),
    ],
    ids=[
        "unknown-status",
        "no-status",
        "cut-json",
        "html",
        "succeeded-without-result",
        "succeeded-without-image-id",
    ],
)
def test_it_reports_a_poll_answer_it_cannot_read_as_a_bad_answer(ember, response):
    ember.get(f"{JOBS}/job_1").mock(return_value=response)

    with pytest.raises(EmberBadAnswer):
        call("poll", "job_1")


def test_it_reports_a_server_error_while_polling_as_an_ember_error(ember):
    ember.get(f"{JOBS}/job_1").respond(500)

    with pytest.raises(EmberError) as failed:
        call("poll", "job_1")

    assert not isinstance(failed.value, EmberNotFound)


# --- fetch --------------------------------------------------------------------


def test_it_fetches_an_images_original_bytes(ember):
    data = png_bytes(seed=2)
    route = ember.get("/api/v1/images/img_1/file").respond(
        200, content=data, headers={"Content-Type": "image/png"}
    )

    fetched = call("fetch", "img_1", sha256=hashlib.sha256(data).hexdigest())

    assert fetched == (data, "image/png")
    assert route.call_count == 1


def test_it_takes_a_sha256_written_in_capitals_as_the_same_digest(ember):
    data = png_bytes(seed=2)
    ember.get("/api/v1/images/img_1/file").respond(
        200, content=data, headers={"Content-Type": "image/png"}
    )

    fetched = call("fetch", "img_1", sha256=hashlib.sha256(data).hexdigest().upper())

    assert fetched == (data, "image/png")


@pytest.mark.parametrize("claim", ["another digest", "empty", "not hex"])
def test_it_refuses_fetched_bytes_that_do_not_match_their_sha256(ember, claim):
    """An empty claim was once taken for none: a review's Ember sent `"sha256": ""` with
    damaged bytes, and they were archived and Ember's copy released."""
    data = png_bytes(seed=2)
    ember.get("/api/v1/images/img_1/file").respond(
        200, content=data, headers={"Content-Type": "image/png"}
    )
    sha256 = {"another digest": hashlib.sha256(b"other").hexdigest(), "empty": ""}.get(claim)

    with pytest.raises(EmberBadAnswer) as failed:
        call("fetch", "img_1", sha256="xyz" if sha256 is None else sha256)

    assert failed.value.message == "The image Ember sent does not match its sha256."


def test_it_reports_an_image_ember_no_longer_has_as_not_found(ember):
    ember.get("/api/v1/images/img_gone/file").respond(
        404, json=ember_error("not_found", "No such image.")
    )

    with pytest.raises(EmberNotFound):
        call("fetch", "img_gone")


# --- release ------------------------------------------------------------------


def test_it_releases_protection_with_exactly_the_documented_body(ember):
    route = ember.patch("/api/v1/explorations/img_1/protection").respond(
        200, json={"protected": False}
    )

    assert call("release", "img_1") is True

    request = route.calls.last.request
    assert request.method == "PATCH"
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {"protected": False, "durable_copy": True}


@pytest.mark.parametrize(
    "outcome",
    [
        {"return_value": httpx.Response(500)},
        {"return_value": httpx.Response(404, json=ember_error("not_found", "No such image."))},
        {"return_value": httpx.Response(204)},
        {"side_effect": httpx.ConnectError("Connection refused")},
        {"side_effect": httpx.ReadTimeout("timed out")},
        {"side_effect": httpx.RemoteProtocolError("Server disconnected")},
        {"side_effect": RuntimeError("something nobody expected")},
    ],
    ids=["500", "404", "204", "connect-error", "read-timeout", "dropped", "any-exception"],
)
def test_it_reports_an_unconfirmed_release_as_false_and_never_raises(ember, outcome):
    route = ember.patch("/api/v1/explorations/img_1/protection").mock(**outcome)

    assert call("release", "img_1") is False
    assert route.call_count == 1


@pytest.mark.parametrize(
    ("release", "file", "let_go", "files_asked"),
    [
        (httpx.Response(200), None, True, 0),
        (httpx.Response(404, json=ember_error("not_found", "No such image.")), 404, True, 1),
        (httpx.Response(404, json=ember_error("not_found", "No such image.")), 200, False, 1),
        (httpx.Response(404, json=ember_error("not_found", "No such image.")), 503, False, 1),
        (httpx.Response(500), 404, False, 0),  # only a 404 is looked into
        (httpx.ConnectError("refused"), 404, False, 0),
    ],
    ids=["200", "404-gone", "404-still-there", "404-file-busy", "500", "unreachable"],
)
def test_it_counts_as_let_go_of_only_a_200_or_an_image_ember_no_longer_has(
    ember, release, file, let_go, files_asked
):
    outcome = (
        {"side_effect": release} if isinstance(release, Exception) else {"return_value": release}
    )
    ember.patch("/api/v1/explorations/img_1/protection").mock(**outcome)
    # A 200 from the file route with a body far past any cap: none of it may be read.
    answer = httpx.Response(file or 200, content=b"x" * (8 * 1024 * 1024))
    files = ember.get("/api/v1/images/img_1/file").mock(return_value=answer)

    assert call("let_go", "img_1") is let_go
    assert files.call_count == files_asked


# --- history ------------------------------------------------------------------


def test_it_asks_history_for_our_app_and_task_and_returns_the_rows(ember):
    items = [
        {
            "id": "hist_1",
            "job_id": "job_1",
            "image_id": "img_1",
            "created_at": "2026-01-01T00:00:00Z",
            "source_metadata": PAYLOAD["source_metadata"],
            "result": RESULT,
        }
    ]
    route = ember.get("/api/v1/history").respond(200, json={"items": items})

    rows = call("history", TASK_ID)

    assert rows == items
    params = route.calls.last.request.url.params
    assert dict(params) == {"source_app": "cwkAvatars", "task_id": TASK_ID}


def test_it_returns_no_rows_when_history_has_none(ember):
    ember.get("/api/v1/history").respond(200, json={"items": []})

    assert call("history", TASK_ID) == []


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, json={}),
        httpx.Response(200, json={"items": {"id": "hist_1"}}),
        httpx.Response(200, json={"items": ["hist_1"]}),
        httpx.Response(200, json=[{"id": "hist_1"}]),
        httpx.Response(200, text="<html>history</html>"),
    ],
    ids=["no-items", "items-object", "items-of-strings", "json-list", "html"],
)
def test_it_reports_a_history_answer_it_cannot_read_as_a_bad_answer(ember, response):
    ember.get("/api/v1/history").mock(return_value=response)

    with pytest.raises(EmberBadAnswer):
        call("history", TASK_ID)
