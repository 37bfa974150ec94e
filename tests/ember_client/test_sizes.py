"""The Ember client stops reading an answer too large to keep (docs/ember.md)."""

import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from studio import originals
from studio.ember.client import (
    EmberBadAnswer,
    EmberError,
    EmberRejected,
)
from tests.ember_client.calls import JOBS, PAYLOAD, TASK_ID, call

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


@pytest.mark.parametrize("where", ["refusal", "failed job"])
def test_it_keeps_at_most_a_thousand_characters_of_embers_message(ember, where):
    said = "The provider refused this prompt. " * 20_000  # 680,000 characters
    error = {"code": "refused", "message": said}
    if where == "refusal":
        ember.post(JOBS).respond(400, json={"error": error})
        with pytest.raises(EmberRejected) as failed:
            call("submit", PAYLOAD)
        message = failed.value.message
    else:
        ember.get(f"{JOBS}/job_1").respond(
            200, json={"id": "job_1", "status": "failed", "error": error}
        )
        message = call("poll", "job_1").error

    assert len(message) <= 1000, f"kept {len(message)} characters of Ember's message"
    assert message.startswith("The provider refused this prompt.") and message.endswith("…")
