"""The Ember client against raw servers on loopback: what each failure of a connection proves.

What matters is what each failure proves: only a request that never got a connection
is "not sent"; once one was had, anything that goes wrong may have reached Ember, and a
paid submit must then be `uncertain`, never sent again on its own. These servers do
each wrong thing on a real socket and record what the client sent.
"""

import gzip
import json
import socketserver
import tracemalloc
import zlib

import pytest

from studio.ember.client import EmberClient
from studio.ember.errors import (
    EmberBadAnswer,
    EmberBusy,
    EmberNotFound,
    EmberTooLarge,
    EmberUnavailable,
    EmberUnknownOutcome,
)
from tests.ember_client.calls import PAYLOAD
from tests.scripted_ember import (
    Request,
    accepted,
    call,
    error_then,
    free_port,
    reply,
    scripted,
)

FLOOD = 256 * 1024 * 1024  # bytes a flooding server would send: far beyond any buffer


def test_a_submit_nobody_listens_for_was_not_sent():
    error = call(f"http://127.0.0.1:{free_port()}", lambda c: c.submit(PAYLOAD))

    assert isinstance(error, EmberUnavailable) and not error.may_have_arrived
    assert "could not be reached" in error.message


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda handler, request: False, id="hangs up after reading"),
        pytest.param(
            lambda handler, request: handler.wfile.write(b"HTTP/1.1 202 Acc") and False,
            id="hangs up mid-answer",
        ),
        pytest.param(
            lambda handler, request: handler.wfile.write(b"SSH-2.0-OpenSSH\r\n\r\n") and False,
            id="answers something that is not HTTP",
        ),
        pytest.param(
            lambda handler, request: (
                handler.wfile.write(
                    b'HTTP/1.1 202 Accepted\r\nContent-Length: 40\r\n\r\n{"id": "job_1"'
                )
                and False
            ),
            id="sends less body than it declared",
        ),
    ],
)
def test_a_submit_that_got_a_connection_may_have_arrived(answer):
    with scripted(answer) as server:
        error = call(server.url, lambda c: c.submit(PAYLOAD))

    assert isinstance(error, EmberUnknownOutcome) and error.may_have_arrived, error
    assert [r.method for r in server.requests] == ["POST"], "sent once, never again"


def test_it_sends_what_ember_expects_and_a_submit_on_its_own_connection():
    with scripted(accepted) as server:

        async def both(client: EmberClient) -> None:
            await client.submit(PAYLOAD, idempotency_key="key-1")
            await client.submit(PAYLOAD)
            await client.poll("job_1")
            await client.poll("job_1")

        call(server.url, both)

    first, _second, poll, _again = server.requests
    assert first.headers["authorization"] == "Bearer test-token"
    assert first.headers["accept-encoding"] == "identity"
    assert first.headers["idempotency-key"] == "key-1"
    assert first.headers["content-type"] == "application/json"
    assert json.loads(first.body) == PAYLOAD
    assert "idempotency-key" not in poll.headers
    # Each submit had a connection of its own; the two polls shared one.
    assert server.connections == 3, f"{server.connections} connections for 2 submits, 2 polls"


def test_a_compressed_answer_is_read_though_none_was_asked_for():
    body = gzip.compress(b'{"id": "job_1", "status": "running"}')

    def compressed(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, "200 OK", body, Content_Encoding="gzip")

    with scripted(compressed) as server:
        job = call(server.url, lambda c: c.poll("job_1"))

    assert job.status == "running"


BOMB = 256 * 1024 * 1024  # bytes of zeros a small gzipped answer inflates to


@pytest.mark.parametrize(
    ("encoding", "body", "says"),
    [
        ("gzip, gzip", gzip.compress(gzip.compress(b"{}")), "does not read: 'gzip, gzip'"),
        ("br", b"\x0b\x01\x80{}\x03", "does not read: 'br'"),
        ("gzip", b"this is not gzip", "could not be read"),
        ("gzip", gzip.compress(b'{"id": "job_1", "status": "running"}')[:-12], "cut short"),
        ("gzip", gzip.compress(b'{"id": "job_1"}') + b"\0" * 4096, "past its end"),
        ("gzip", gzip.compress(b'{"id": "job_1",') + gzip.compress(b'"x": 1}'), "past its end"),
    ],
    ids=["gzip twice", "brotli", "not gzip", "gzip cut short", "bytes after", "two members"],
)
def test_an_answer_in_an_encoding_it_cannot_read_is_a_bad_answer(encoding, body, says):
    """Found by a review: httpx's own decoding error escaped the client, and layered gzip
    inflated in one piece (1.8 KB to 2.1 GB). Only gzip is read, and only once."""

    def encoded(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, "200 OK", body, Content_Encoding=encoding)

    with scripted(encoded) as server:
        error = call(server.url, lambda c: c.poll("job_1"))

    assert isinstance(error, EmberBadAnswer), error
    assert says in error.message


@pytest.mark.parametrize(
    ("status", "call_it", "refused"),
    [
        ("503 Service Unavailable", lambda c: c.submit(PAYLOAD), EmberBusy),
        ("404 Not Found", lambda c: c.poll("job_1"), EmberNotFound),
    ],
    ids=["busy submit", "unknown job"],
)
def test_a_refusal_whose_body_cannot_be_read_still_counts_as_that_refusal(status, call_it, refused):
    """Found by a review: a 503 whose body failed its encoding became "may have arrived"."""

    def refusing(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, status, b"not gzip at all", Content_Encoding="gzip")

    with scripted(refusing) as server:
        error = call(server.url, call_it)

    assert isinstance(error, refused), error
    assert not error.may_have_arrived


def test_a_gzipped_image_past_the_cap_is_refused_without_inflating_it(settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 10 * 1024 * 1024
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    zeros = b"\0" * (16 * 1024 * 1024)
    bomb = b"".join([packer.compress(zeros) for _ in range(BOMB // len(zeros))] + [packer.flush()])

    def inflating(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, "200 OK", bomb, Content_Encoding="gzip")

    with scripted(inflating) as server:
        tracemalloc.start()
        try:
            error = call(server.url, lambda c: c.fetch("img_1"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert isinstance(error, EmberTooLarge), error
    assert peak < 40 * 1024 * 1024, f"{peak / 2**20:.0f} MiB held for a {len(bomb)}-byte answer"


def test_json_nested_deeper_than_python_goes_is_a_bad_answer():
    def nested(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, "200 OK", b"[" * 200_000)

    with scripted(nested) as server:
        error = call(server.url, lambda c: c.poll("job_1"))

    assert isinstance(error, EmberBadAnswer), error


def test_an_image_larger_than_allowed_is_not_read_and_its_connection_not_reused(settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 1000
    sent: list[int] = []

    def flood(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        if request.path.endswith("/file"):
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                for _ in range(FLOOD // 65536):  # undeclared, 64 KiB at a time
                    handler.wfile.write(b"10000\r\n" + b"x" * 65536 + b"\r\n")
                    sent.append(65536)
            except OSError:
                return False  # the client let go
            return False
        return accepted(handler, request)

    with scripted(flood) as server:
        error, job = call(
            server.url, error_then(lambda c: c.fetch("img_1"), lambda c: c.poll("job_1"))
        )

    assert isinstance(error, EmberTooLarge)
    assert job.status == "running", "the next request got an answer on a new connection"
    assert server.connections == 2
    # Loopback buffers take a few megabytes unread; the rest found the connection closed.
    assert sum(sent) < FLOOD, f"the server wrote all {sum(sent)} bytes: it was all read"


def test_a_poll_answered_with_nonsense_is_an_error_and_the_next_poll_works():
    answers = iter([b"{not json", b'{"id": "job_1", "status": "running"}'])

    def odd(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        return reply(handler, "200 OK", next(answers), Content_Type="application/json")

    with scripted(odd) as server:
        error, job = call(
            server.url, error_then(lambda c: c.poll("job_1"), lambda c: c.poll("job_1"))
        )

    assert isinstance(error, EmberBadAnswer)
    assert job.status == "running"
