"""The Ember client's submit and what every request carries (docs/ember.md).

Every failure is a typed error that says whether the request may have reached
Ember; that is what decides whether a paid submit may be sent again.
"""

import json
from datetime import timedelta
from email.utils import format_datetime

import httpx
import pytest
from django.utils import timezone

from studio.ember.client import (
    EmberAuthError,
    EmberBadAnswer,
    EmberBusy,
    EmberRejected,
    EmberUnavailable,
    EmberUnknownOutcome,
    Submitted,
)
from tests.ember_client.calls import JOBS, PAYLOAD, TASK_ID, call, ember_error
from tests.factories import png_bytes

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
