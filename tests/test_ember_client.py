"""The Ember client (docs/ember.md), mocked at the HTTP boundary with respx.

Every failure is a typed error that says whether the request may have reached
Ember; that is what decides whether a paid submit may be sent again.
"""

import hashlib
import json
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import respx
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import originals
from studio.ember.client import (
    EmberAuthError,
    EmberBadAnswer,
    EmberBusy,
    EmberClient,
    EmberError,
    EmberNotFound,
    EmberRejected,
    EmberUnavailable,
    EmberUnknownOutcome,
    Job,
    Submitted,
)
from tests.factories import ember_result, png_bytes

JOBS = "/api/v1/api-generators/jobs"
SYNC_DOOR = "/api/v1/api-generators/generate"
TASK_ID = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"

PAYLOAD: dict[str, Any] = {
    "kind": "image",
    "provider": "openai",
    "model": None,
    "prompt": "a friendly portrait, watercolour",
    "frame": "image",
    "references": [],
    "source_metadata": {
        "source_app": "cwkAvatars",
        "purpose": "exploration",
        "batch_id": "0b9a8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d",
        "task_id": TASK_ID,
        "attempt": 1,
        "subjects": [1],
        "frame": "image",
        "candidate": 1,
    },
}

RESULT: dict[str, Any] = ember_result()


def ember_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def call(method: str, *args: Any, **kwargs: Any) -> Any:
    """Run one EmberClient call from this sync test, with a fresh client, and close it."""

    async def go() -> Any:
        client = EmberClient()
        try:
            return await getattr(client, method)(*args, **kwargs)
        finally:
            await client.aclose()

    return async_to_sync(go)()


@pytest.fixture(autouse=True)
def sync_door(ember: respx.Router) -> Iterator[respx.Route]:
    """Watch the synchronous door (never to be called) and the token on every call."""
    route = ember.post(SYNC_DOOR).respond(201, json={"id": "img_sync"})
    yield route
    assert not route.called, "the client called Ember's synchronous /generate door"
    for sent in ember.calls:
        assert sent.request.headers["Authorization"] == "Bearer test-token"


# --- every request ------------------------------------------------------------


def test_it_sends_the_bearer_token_on_every_kind_of_request(ember):
    data = png_bytes(seed=1)
    ember.post(JOBS).respond(202, json={"id": "job_1", "status": "queued"})
    ember.get(f"{JOBS}/job_1").respond(200, json={"id": "job_1", "status": "running"})
    ember.get("/api/v1/images/img_1/file").respond(
        200, content=data, headers={"Content-Type": "image/png"}
    )
    ember.patch("/api/v1/explorations/img_1/protection").respond(200, json={})
    ember.get("/api/v1/history").respond(200, json={"items": []})

    call("submit", PAYLOAD)
    call("poll", "job_1")
    call("fetch", "img_1")
    call("release", "img_1")
    call("history", TASK_ID)

    assert len(ember.calls) == 5
    assert {c.request.headers["Authorization"] for c in ember.calls} == {"Bearer test-token"}


# --- submit -------------------------------------------------------------------


def test_it_submits_to_the_asynchronous_door_and_returns_the_job_id(ember):
    route = ember.post(JOBS).respond(
        202, json={"id": "job_1", "status": "queued", "created_at": "2026-01-01T00:00:00Z"}
    )

    submitted = call("submit", PAYLOAD)

    assert submitted == Submitted(job_id="job_1", replayed=False)
    assert route.call_count == 1
    request = route.calls.last.request
    assert json.loads(request.content) == PAYLOAD
    assert "Idempotency-Key" not in request.headers


def test_it_sends_a_clips_idempotency_key_and_reads_a_replay(ember):
    route = ember.post(JOBS).respond(
        202, json={"id": "job_9", "status": "running"}, headers={"Idempotent-Replayed": "true"}
    )

    submitted = call("submit", {**PAYLOAD, "kind": "clip"}, idempotency_key="key-0123abcd")

    assert submitted == Submitted(job_id="job_9", replayed=True)
    assert route.calls.last.request.headers["Idempotency-Key"] == "key-0123abcd"


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("Connection refused"),
        httpx.ConnectTimeout("timed out while connecting"),
    ],
    ids=["connect-error", "connect-timeout"],
)
def test_it_reports_a_submit_that_never_left_as_unavailable(ember, exc):
    ember.post(JOBS).mock(side_effect=exc)

    with pytest.raises(EmberUnavailable) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is False
    assert failed.value.message == f"Ember could not be reached ({type(exc).__name__})."


@pytest.mark.parametrize("status", [429, 503])
def test_it_reports_a_busy_ember_with_its_retry_after(ember, status):
    ember.post(JOBS).respond(
        status, json=ember_error("busy", "Too many jobs right now."), headers={"Retry-After": "7"}
    )

    with pytest.raises(EmberBusy) as failed:
        call("submit", PAYLOAD)

    assert failed.value.retry_after == 7
    assert failed.value.status == status
    assert failed.value.may_have_arrived is False
    assert failed.value.message == "Too many jobs right now."


def test_it_reads_a_retry_after_given_as_an_http_date(ember):
    when = timezone.now() + timedelta(seconds=120)
    ember.post(JOBS).respond(429, headers={"Retry-After": format_datetime(when, usegmt=True)})

    with pytest.raises(EmberBusy) as failed:
        call("submit", PAYLOAD)

    assert 100 <= failed.value.retry_after <= 120


def http_date(seconds_from_now: float) -> str:
    return format_datetime(timezone.now() + timedelta(seconds=seconds_from_now), usegmt=True)


# What a Retry-After header says (a float: an HTTP date that many seconds from now), and how
# long the client then waits (low, high): never less than one pump tick (1 s), never more
# than an hour, and 30 s when it makes no sense.
RETRY_AFTERS = {
    "seconds": ("7", 7, 7),
    "two minutes": ("120", 120, 120),
    "zero": ("0", 1, 1),
    "a fraction": ("0.2", 1, 1),
    "negative": ("-5", 1, 1),
    "minus infinity": ("-inf", 1, 1),
    "a day": ("86400", 3600, 3600),
    "1e400": ("1e400", 3600, 3600),
    "inf": ("inf", 3600, 3600),
    "Infinity": ("Infinity", 3600, 3600),
    "nan": ("nan", 30, 30),
    "a word": ("soon", 30, 30),
    "hex": ("0x10", 30, 30),
    "with a unit": ("12 seconds", 30, 30),
    "a year no date holds": ("Mon, 01 Jan 99999 00:00:00 GMT", 30, 30),
    "a date an hour ago": (-3600.0, 1, 1),
    "the epoch": ("Thu, 01 Jan 1970 00:00:00 GMT", 1, 1),
    "a date in two minutes": (120.0, 100, 120),
    "a date next week": (7 * 86400.0, 3600, 3600),
}


@pytest.mark.parametrize(("header", "low", "high"), RETRY_AFTERS.values(), ids=list(RETRY_AFTERS))
def test_it_bounds_retry_after_between_one_second_and_an_hour(ember, header, low, high):
    if isinstance(header, float):
        header = http_date(header)
    ember.post(JOBS).respond(429, headers={"Retry-After": header})

    with pytest.raises(EmberBusy) as failed:
        call("submit", PAYLOAD)

    assert low <= failed.value.retry_after <= high


@pytest.mark.parametrize("status", [401, 403])
def test_it_reports_refused_credentials_as_an_auth_error(ember, status):
    ember.post(JOBS).respond(status, json=ember_error("unauthorized", "Bad token."))

    with pytest.raises(EmberAuthError) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is False
    assert failed.value.status == status
    assert failed.value.message == "Bad token."


@pytest.mark.parametrize("status", [400, 422])
def test_it_reports_a_refused_request_with_embers_message(ember, status):
    ember.post(JOBS).respond(
        status, json=ember_error("invalid_prompt", "The prompt breaks the content policy.")
    )

    with pytest.raises(EmberRejected) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is False
    assert failed.value.status == status
    assert failed.value.message == "The prompt breaks the content policy."
    assert str(failed.value) == "The prompt breaks the content policy."


def test_it_names_the_status_when_a_refusal_carries_no_message(ember):
    ember.post(JOBS).respond(400, text="<html>Bad Request</html>")

    with pytest.raises(EmberRejected) as failed:
        call("submit", PAYLOAD)

    assert failed.value.message == "Ember answered HTTP 400."


@pytest.mark.parametrize("status", [500, 502, 504])
def test_it_reports_a_server_error_to_a_submit_as_an_unknown_outcome(ember, status):
    ember.post(JOBS).respond(status, text="upstream trouble")

    with pytest.raises(EmberUnknownOutcome) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is True
    assert failed.value.status == status


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("timed out while reading"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
    ],
    ids=["read-timeout", "connection-dropped"],
)
def test_it_reports_a_submit_lost_after_sending_as_an_unknown_outcome(ember, exc):
    ember.post(JOBS).mock(side_effect=exc)

    with pytest.raises(EmberUnknownOutcome) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is True
    assert failed.value.message == (
        f"The connection to Ember failed after sending ({type(exc).__name__})."
    )


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(202, json={"status": "queued"}),
        httpx.Response(202, json={"id": 12345, "status": "queued"}),
        httpx.Response(202, json={"id": "", "status": "queued"}),
        httpx.Response(202, json=["job_1"]),
        httpx.Response(202, text="<html><body>Accepted</body></html>"),
    ],
    ids=["no-id", "number-id", "empty-id", "json-list", "html"],
)
def test_it_reports_a_202_it_cannot_read_as_a_bad_answer_that_may_have_arrived(ember, response):
    ember.post(JOBS).mock(return_value=response)

    with pytest.raises(EmberBadAnswer) as failed:
        call("submit", PAYLOAD)

    assert failed.value.may_have_arrived is True


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


def test_it_refuses_fetched_bytes_that_do_not_match_their_sha256(ember):
    data = png_bytes(seed=2)
    ember.get("/api/v1/images/img_1/file").respond(
        200, content=data, headers={"Content-Type": "image/png"}
    )

    with pytest.raises(EmberBadAnswer) as failed:
        call("fetch", "img_1", sha256=hashlib.sha256(b"other bytes").hexdigest())

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
    "a non-ASCII digit": "img_\u0661",
}
SAFE_IDS = ["job_1", "img_01HZX:abc-1.v2", "7", "A" * 128]


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


# --- answers too large to read --------------------------------------------------------

CHUNK = 64 * 1024  # bytes a streamed answer yields at a time
ANSWER_CAP = 1024 * 1024  # bytes: no JSON answer of Ember's is anywhere near this


class Flood:
    """An answer body that streams `total` bytes in chunks, counting what was taken."""

    def __init__(self, total: int, *, fill: bytes = b"\0") -> None:
        self.total = total
        self.fill = fill
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.taken < self.total:
            chunk = self.fill * min(CHUNK, self.total - self.taken)
            self.taken += len(chunk)
            yield chunk


def streamed(status: int, flood: Flood, **headers: str) -> Any:
    """A route side effect answering `status` with `flood` as a stream."""
    return lambda request, **kwargs: httpx.Response(
        status, content=flood.__aiter__(), headers=headers
    )


def test_it_stops_reading_an_image_once_it_passes_the_size_cap(ember, settings):
    settings.AVATARS_MAX_IMAGE_BYTES = cap = 2 * 1024 * 1024
    flood = Flood(40 * cap)
    ember.get("/api/v1/images/img_1/file").mock(
        side_effect=streamed(200, flood, **{"Content-Type": "image/png"})
    )

    tracemalloc.start()
    try:
        with pytest.raises(EmberError) as failed:
            call("fetch", "img_1")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert failed.value.message == originals.too_large()
    assert flood.taken <= cap + CHUNK, f"read {flood.taken} bytes; the cap is {cap} + {CHUNK}"
    assert peak < 2 * cap, f"peak memory {peak} bytes during the fetch; the cap is {cap}"


def test_it_refuses_an_image_whose_declared_length_passes_the_cap_without_reading_it(
    ember, settings
):
    settings.AVATARS_MAX_IMAGE_BYTES = cap = 1024 * 1024
    flood = Flood(cap + 1)
    ember.get("/api/v1/images/img_1/file").mock(
        side_effect=streamed(200, flood, **{"Content-Length": str(cap + 1)})
    )

    with pytest.raises(EmberError) as failed:
        call("fetch", "img_1")

    assert failed.value.message == originals.too_large()
    assert flood.taken <= CHUNK, f"read {flood.taken} bytes of an answer declared too large"


def test_it_fetches_an_image_of_exactly_the_cap(ember, settings):
    settings.AVATARS_MAX_IMAGE_BYTES = cap = 1024 * 1024 + 7
    flood = Flood(cap, fill=b"\x89")
    ember.get("/api/v1/images/img_1/file").mock(
        side_effect=streamed(200, flood, **{"Content-Type": "image/png"})
    )

    data, content_type = call("fetch", "img_1")

    assert (len(data), content_type) == (cap, "image/png"), f"the cap is {cap} bytes"


JSON_ROUTES = {
    "submit": ("post", JOBS, 202, (PAYLOAD,)),
    "poll": ("get", f"{JOBS}/job_1", 200, ("job_1",)),
    "history": ("get", "/api/v1/history", 200, (TASK_ID,)),
}


@pytest.mark.parametrize(("method", "route"), JSON_ROUTES.items(), ids=JSON_ROUTES.keys())
def test_it_stops_reading_a_json_answer_past_a_mebibyte(ember, method, route):
    verb, path, status, args = route
    flood = Flood(64 * ANSWER_CAP, fill=b" ")  # whitespace: it would even parse as JSON
    getattr(ember, verb)(path).mock(side_effect=streamed(status, flood))

    with pytest.raises(EmberBadAnswer) as failed:
        call(method, *args)

    assert failed.value.may_have_arrived is True
    assert flood.taken <= ANSWER_CAP + CHUNK, (
        f"read {flood.taken} bytes of a {method} answer; the cap is {ANSWER_CAP} + {CHUNK}"
    )


@pytest.mark.parametrize(("method", "route"), JSON_ROUTES.items(), ids=JSON_ROUTES.keys())
def test_it_refuses_a_json_answer_declared_past_a_mebibyte_without_reading_it(ember, method, route):
    verb, path, status, args = route
    flood = Flood(ANSWER_CAP + 1, fill=b" ")
    getattr(ember, verb)(path).mock(
        side_effect=streamed(status, flood, **{"Content-Length": str(ANSWER_CAP + 1)})
    )

    with pytest.raises(EmberBadAnswer):
        call(method, *args)

    assert flood.taken <= CHUNK, f"read {flood.taken} bytes of an answer declared too large"


def test_it_still_honours_a_refusal_whose_body_is_too_large_to_read(ember):
    flood = Flood(64 * ANSWER_CAP, fill=b" ")
    ember.post(JOBS).mock(side_effect=streamed(400, flood))

    with pytest.raises(EmberRejected) as failed:
        call("submit", PAYLOAD)

    assert failed.value.message == "Ember answered HTTP 400."
    assert flood.taken <= ANSWER_CAP + CHUNK, (
        f"read {flood.taken} bytes of a refusal; the cap is {ANSWER_CAP} + {CHUNK}"
    )
