"""Reading Ember's answers: bodies within a bound, gzip inflated a piece at a time, JSON.

An answer is read to at most a bound (a job's few kilobytes of JSON, an image's cap),
counted as it arrives, so a flood or a compressed bomb is never held whole; whatever
cannot be read is an `EmberBadAnswer`, never another exception.
"""

import json
import math
import re
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from django.utils import timezone

from studio.ember.errors import EmberBadAnswer

MAX_ANSWER_BYTES = 1024 * 1024  # bytes; Ember's JSON answers are a few kilobytes
# What JSON can say in a string and no database stores: a lone surrogate (SQLite's and
# PostgreSQL's text is UTF-8), NUL (PostgreSQL's text and jsonb refuse it).
UNSTORABLE = re.compile("[\ud800-\udfff\x00]")
# What is kept of a succeeded job's result (`kept_result`): the fields the contract names.
IMAGE_FIELDS = ("id", "mime", "sha256", "bytes")
METADATA_FIELDS = ("provider", "model", "width", "height")
KEPT_CHARS = 1000  # characters of each string kept from it; Ember's are far shorter
DEFAULT_RETRY_AFTER = 30.0  # seconds, when a 429/503 names no usable Retry-After
MIN_RETRY_AFTER = 1.0  # seconds: one pump tick, whatever Ember says
MAX_RETRY_AFTER = 3600.0  # seconds: a busy Ember is asked again within the hour


@dataclass(frozen=True)
class Reply:
    """An answer read within its bound; `content` is None when the body was too large."""

    status_code: int
    headers: httpx.Headers
    content: bytes | None

    def json(self) -> Any:
        """Decode the body as JSON that a database can store; ValueError when it cannot be.

        Ember's answers are kept (a task's result, an error, an asset's row): NaN, an
        infinity or a number past a double's range is no JSON a database keeps, and is
        refused; a lone surrogate or NUL in a string becomes U+FFFD. Found by a review
        with an Ember double of its own: such answers could not be written, and left
        tasks where nothing moved them.
        """
        if self.content is None:
            raise ValueError("The answer was too large to read.")
        return storable(json.loads(self.content, parse_constant=_no_number, parse_float=_finite))


def storable(value: Any) -> Any:
    """Return decoded JSON with every string (and key) a database can store."""
    if isinstance(value, str):
        return UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    return value


def _no_number(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON can hold.")


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is past what a number can hold.")
    return number


async def read_answer(response: httpx.Response, limit: int) -> bytes | None:
    """Read a success's body to `limit`; a refusal's to MAX_ANSWER_BYTES, or not at all.

    A refusal's status is the answer (busy, not found, refused): a body that cannot be
    read only loses its message, as one too large does.
    """
    if response.is_success:
        return await read_within(response, limit)
    try:
        return await read_within(response, MAX_ANSWER_BYTES)
    except EmberBadAnswer:
        return None
    except httpx.TransportError:
        # Cut off on the way (a 429 sent before Ember read the request, then a reset: a
        # review's): a status that decides alone still does; any other is an answer lost.
        if 400 <= response.status_code < 500 or response.status_code == 503:
            return None
        raise


async def read_within(response: httpx.Response, limit: int) -> bytes | None:
    """Read the body, or return None as soon as it is known to pass `limit` bytes.

    Counting the decoded bytes as they arrive keeps a flood (or a declared one) from
    ever being held in memory: at most `limit` plus one chunk is read. A gzipped answer
    (sent although none was asked for) is inflated a bounded piece at a time, so a
    small bomb never becomes a large buffer; any other encoding is refused.
    """
    try:
        read = response.content  # read already (a mock's answer), and decoded by httpx
    except httpx.ResponseNotRead:
        pass
    else:
        return None if len(read) > limit else read
    declared = response.headers.get("Content-Length", "")
    inflate = _inflater(response.headers.get("Content-Encoding", ""))
    if inflate is None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for raw in response.aiter_raw():
        data = raw
        while data:
            chunk = data if inflate is None else _inflate(inflate, data, limit + 1 - size)
            data = b"" if inflate is None else inflate.unconsumed_tail
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    if inflate is not None and not inflate.eof:
        raise EmberBadAnswer("Ember's compressed answer was cut short.")
    return b"".join(chunks)


def _inflater(encoding: str) -> Any:
    """Return a gzip inflater for `Content-Encoding: gzip`, None for none; refuse others."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    raise EmberBadAnswer(
        f"Ember answered in an encoding Avatars does not read: {ascii(name)[:40]}."
    )


def _inflate(inflate: Any, data: bytes, most: int) -> bytes:
    """Inflate at most `most` bytes of `data` (the rest waits in `unconsumed_tail`).

    One gzip stream is an answer; bytes after its end (another member, anything) are
    not read on, nor held: the answer is refused.
    """
    try:
        inflated = inflate.decompress(data, most)
    except zlib.error as exc:
        raise EmberBadAnswer(f"Ember's compressed answer could not be read ({exc}).") from None
    if inflate.unused_data:
        raise EmberBadAnswer("Ember's compressed answer goes on past its end.")
    return inflated


def json_object(response: Reply) -> dict[str, Any]:
    if response.content is None:
        raise EmberBadAnswer(
            f"Ember answered {response.status_code} with a body over {MAX_ANSWER_BYTES} bytes; "
            "it was not read."
        )
    try:
        body = response.json()
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python goes
        raise EmberBadAnswer(
            f"Ember answered {response.status_code} with a body that is not JSON."
        ) from None
    if not isinstance(body, dict):
        raise EmberBadAnswer(
            f"Ember answered {response.status_code} with JSON that is not an object."
        )
    return body


def kept_result(result: dict[str, Any]) -> dict[str, Any]:
    """Return what Avatars keeps of a succeeded job's result (checked): the fields the
    contract names, each string cut to `KEPT_CHARS`; nothing else Ember put in it.

    The answer is saved on its task and its asset and read with every page that lists
    them: a review's Ember padded each to 1 MB of empty lists, and one batch's page then
    took 13 s of CPU and 2.5 GB to draw.
    """
    image = result["image"]
    kept_image = {key: _kept(image[key]) for key in IMAGE_FIELDS if key in image}
    metadata = image.get("metadata")
    if isinstance(metadata, dict):
        kept_image["metadata"] = {
            key: _kept(metadata[key]) for key in METADATA_FIELDS if key in metadata
        }
    history = result.get("history")
    return {
        "image": kept_image,
        "history": None if history is None else {"id": history["id"]},
        "history_error": _kept(result.get("history_error")),
    }


def _kept(value: object) -> object:
    """Return a scalar as it is (a string cut to `KEPT_CHARS`), anything else cut as text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value)[: KEPT_CHARS + 1]
    return text[:KEPT_CHARS]


UNFRAMED = (
    "Ember sent the image without its length, its sha256 or its size in bytes: an answer "
    "that ends with its connection cannot be told whole."
)


def counted(value: object) -> bool:
    """Say whether `value` is a count of bytes (an answer's `bytes`): an int, 0 or more."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def framed(headers: httpx.Headers) -> bool:
    """Say whether an answer said where its body ends (Content-Length, or chunks), so that
    one cut short is an error of the exchange, not a shorter body."""
    chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
    return chunked or "Content-Length" in headers


def retry_after(response: Reply) -> float:
    """Return how long Ember asks us to wait, bounded to [MIN_RETRY_AFTER, MAX_RETRY_AFTER].

    The floor keeps "0" or a date in the past from turning into a POST per pump
    pass; the ceiling keeps "1e400" or a date years ahead from parking a task
    for good (or overflowing the timestamp it becomes).
    """
    raw = response.headers.get("Retry-After", "").strip()
    seconds = retry_after_seconds(raw) if raw else None
    if seconds is None or math.isnan(seconds):
        return DEFAULT_RETRY_AFTER
    return min(MAX_RETRY_AFTER, max(MIN_RETRY_AFTER, seconds))


def retry_after_seconds(raw: str) -> float | None:
    """Read a Retry-After value (seconds or an HTTP date); None when it is neither."""
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return (parsedate_to_datetime(raw) - timezone.now()).total_seconds()
    except (TypeError, ValueError, OverflowError, IndexError):
        # Not a date, or one no datetime can hold (or without a zone to compare).
        return None
