"""The Ember client's own transport (studio/ember/transport.py) on real loopback sockets.

It keeps idle connections for polls, fetches and releases (never for a submit),
reuses none that the server closed, asked to close or left idle too long, sends
bodies byte for byte, and speaks TLS with the machine's trusted certificates.
"""

import asyncio
import hashlib
import json
import socket
import socketserver
import struct
import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from studio.ember import client as ember_client
from studio.ember import transport
from studio.ember.client import EmberClient
from studio.ember.errors import (
    EmberBadAnswer,
    EmberBusy,
    EmberUnavailable,
    EmberUnknownOutcome,
)
from tests.ember_client.calls import PAYLOAD
from tests.scripted_ember import (
    TLS,
    Request,
    accepted,
    call,
    error_then,
    reply,
    scripted,
    server_tls,
)


def test_polls_one_after_another_ride_one_kept_alive_connection():
    with scripted(accepted) as server:

        async def polls(client: EmberClient) -> list[str]:
            return [(await client.poll("job_1")).status for _ in range(20)]

        statuses = call(server.url, polls)

    assert statuses == ["running"] * 20
    assert server.connections == 1, f"{server.connections} connections for 20 polls in turn"


def test_polls_in_flight_together_open_one_connection_each_and_keep_them():
    with scripted(accepted) as server:

        async def rounds(client: EmberClient) -> None:
            for _ in range(3):
                await asyncio.gather(*(client.poll("job_1") for _ in range(12)))

        call(server.url, rounds, slots=12)

    assert len(server.requests) == 36
    assert server.connections == 12, f"{server.connections} connections for 3 rounds of 12"


def test_a_connection_idle_longer_than_it_may_be_is_not_reused(monkeypatch):
    monkeypatch.setattr(transport, "KEEP_IDLE", 0.05)
    with scripted(accepted) as server:

        async def apart(client: EmberClient) -> None:
            await client.poll("job_1")
            await client.poll("job_1")  # at once: the same connection
            await asyncio.sleep(0.2)
            await client.poll("job_1")  # idle too long: a new one

        call(server.url, apart)

    assert server.connections == 2, f"{server.connections} connections (expected 2)"


def test_a_connection_the_server_asked_to_close_is_not_reused():
    def closing(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        reply(handler, "200 OK", b'{"id": "job_1", "status": "running"}', Connection="close")
        return False

    with scripted(closing) as server:

        async def twice(client: EmberClient) -> list[str]:
            return [(await client.poll("job_1")).status for _ in range(2)]

        statuses = call(server.url, twice)

    assert statuses == ["running", "running"], "no poll failed on a closed connection"
    assert server.connections == 2


def test_a_large_submit_arrives_byte_for_byte():
    photo = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB, every byte value
    payload = {**PAYLOAD, "references": [{"name": "ref.png", "data": photo.hex()}]}
    with scripted(accepted) as server:
        submitted = call(server.url, lambda c: c.submit(payload))

    assert submitted.job_id == "job_1"
    (request,) = server.requests
    assert int(request.headers["content-length"]) == len(request.body)
    sent = json.loads(request.body)["references"][0]["data"]
    assert hashlib.sha256(bytes.fromhex(sent)).digest() == hashlib.sha256(photo).digest()


def test_it_speaks_tls_to_an_ember_whose_certificate_the_machine_trusts(monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ember.pem"))
    with scripted(accepted, tls=server_tls()) as server:

        async def both(client: EmberClient) -> tuple[str, str]:
            submitted = await client.submit(PAYLOAD)
            return submitted.job_id, (await client.poll(submitted.job_id)).status

        answers = call(server.url, both)

    assert server.url.startswith("https://")
    assert answers == ("job_1", "running")
    assert [r.method for r in server.requests] == ["POST", "GET"]


def test_a_certificate_nobody_trusts_means_ember_was_not_reached(monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ember.pem"))
    with scripted(accepted, tls=server_tls("untrusted")) as server:
        error = call(server.url, lambda c: c.submit(PAYLOAD))

    assert isinstance(error, EmberUnavailable) and not error.may_have_arrived, error
    assert server.requests == [], "nothing was sent before the handshake failed"


@pytest.mark.parametrize("keep", [0, 4])
def test_closing_the_client_closes_every_connection_it_kept(keep):
    with scripted(accepted) as server:

        async def go() -> list[bool]:
            pool = transport.Transport(keep=keep)
            client = EmberClient(base_url=server.url, token="t", transport=pool)
            await asyncio.gather(*(client.poll("job_1") for _ in range(4)))
            kept = [c.writer for idle in pool._idle.values() for c in idle]
            await client.aclose()
            return [writer.is_closing() for writer in kept]

        closed = async_to_sync(go)()

    assert len(closed) == keep
    assert all(closed)


STRAY = b'{"id": "job_1", "status": "succeeded", "result": {"image": {"id": "img_stray"}}}'


def stray_answer() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(STRAY), STRAY)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("when", ["after a pause", "with the answer"])
def test_bytes_after_an_answer_never_answer_the_next_request(when, tls, monkeypatch):
    """Found by a review: a stray second answer was read as the next poll's (another job's
    image). Whatever follows an answer on its connection, the next request gets its own."""
    served = []

    def answer(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        job = request.path.rsplit("/", 1)[-1]
        served.append(job)
        body = json.dumps({"id": job, "status": "running"}).encode()
        own = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        if len(served) > 1:
            handler.wfile.write(own)
        elif when == "after a pause":
            handler.wfile.write(own)
            handler.wfile.flush()
            time.sleep(0.05)
            handler.wfile.write(stray_answer())
        elif when == "with the answer":
            handler.wfile.write(own + stray_answer())
        else:  # declares less than it sends
            handler.wfile.write(
                own.replace(b"Content-Length: %d" % len(body), b"Content-Length: 20")
            )
        handler.wfile.flush()
        return True

    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ember.pem"))
    with scripted(answer, tls=server_tls() if tls else None) as server:

        async def two(client: EmberClient) -> list[Any]:
            first = await client.poll("job_1")
            await asyncio.sleep(0.2)
            return [first, await client.poll("job_2")]

        _first, second = call(server.url, two)

    assert (second.id, second.status, second.result) == ("job_2", "running", None), second
    assert server.connections == 2, "the connection the stray bytes came on was not reused"


def test_a_poll_answered_about_another_job_is_a_bad_answer_and_its_connection_dropped():
    def other(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        if request.path.endswith("/job_2"):
            return reply(handler, "200 OK", STRAY)
        return accepted(handler, request)

    with scripted(other) as server:
        error, job = call(
            server.url, error_then(lambda c: c.poll("job_2"), lambda c: c.poll("job_1"))
        )

    assert "job_1" in error.message and "job_2" in error.message
    # The connection that brought another job's answer may be out of step: not reused.
    assert job.status == "running" and server.connections == 2


def test_a_submit_stuck_on_a_server_that_never_reads_lets_go_of_its_socket(monkeypatch):
    """Found by a review: after the deadline the socket and the unsent photos stayed,
    still being sent whenever the server read again (40 MiB held for 5 stuck submits)."""
    monkeypatch.setattr(ember_client, "DEADLINES", {"submit": 0.3, "fetch": 0.3})
    held: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    payload = {**PAYLOAD, "prompt": "x" * (8 * 1024 * 1024)}

    async def stuck(client: EmberClient) -> list[Any]:
        errors = []
        for _ in range(5):
            errors.append(await asyncio.gather(client.submit(payload), return_exceptions=True))
            held.append(listener.accept()[0])  # accepted, never read
        return errors

    with listener:
        errors = call(url, stuck)
        read = []
        for conn in held:
            with conn:
                conn.settimeout(5)
                read.append(drain(conn))

    assert all(isinstance(e[0], EmberUnknownOutcome) for e in errors), errors
    # Each connection ended (EOF or reset) after what the kernel had buffered: the
    # client did not keep sending the 8 MiB body once it had given up.
    assert all(n < len(payload["prompt"]) for n in read), f"bytes read per connection: {read}"


def drain(conn: socket.socket) -> int:
    """Read until the peer closes (or resets); return the bytes read."""
    total = 0
    try:
        while chunk := conn.recv(1 << 20):
            total += len(chunk)
    except ConnectionResetError:
        pass
    return total


def test_an_endless_stream_of_interim_answers_is_given_up_on_after_a_few(monkeypatch):
    """Found by a review: "102 Processing" heads were read without end, one core busy until
    the exchange's deadline (hundreds of MB read), on every poll."""
    monkeypatch.setattr(ember_client, "DEADLINE", 5.0)
    written = []

    def flood(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        started = time.monotonic()
        try:
            while time.monotonic() - started < 10:  # far past the deadline
                handler.wfile.write(b"HTTP/1.1 102 Processing\r\n\r\n")
                written.append(1)
        except OSError:
            pass  # the client let go
        return False

    with scripted(flood) as server:
        started = time.monotonic()
        error = call(server.url, lambda client: client.poll("job_1"))
        took = time.monotonic() - started

    assert isinstance(error, EmberUnknownOutcome), error
    assert str(error.__cause__) == transport.TOO_MANY_INTERIM, error.__cause__
    assert took < 5.0, f"gave up after {took:.1f} s ({len(written)} interim heads sent)"


def test_a_few_interim_answers_before_the_answer_are_read_past():
    def processing(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        handler.wfile.write(b"HTTP/1.1 102 Processing\r\n\r\n" * transport.MAX_INTERIM)
        return reply(handler, "200 OK", b'{"id": "job_1", "status": "running"}')

    with scripted(processing) as server:
        job = call(server.url, lambda client: client.poll("job_1"))

    assert (job.id, job.status) == ("job_1", "running"), job


def closing(body: bytes) -> Any:
    """A server that answers a fetch with `body` and ends it by closing the connection
    (no Content-Length, no chunks): what HTTP/1.1 allows, and a cut looks just like it."""

    def answer(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n"
        handler.wfile.write(head + body)
        handler.wfile.flush()
        return False  # and close

    return answer


WHOLE = b"\x89PNG\r\n\x1a\n" + b"pixels" * 50


@pytest.mark.parametrize(
    ("claims", "error"),
    [
        ({}, "Ember sent the image without its length, its sha256 or its size in bytes"),
        ({"size": len(WHOLE)}, f"The image Ember sent is 200 bytes; its answer said {len(WHOLE)}."),
        ({"sha256": hashlib.sha256(WHOLE).hexdigest()}, "does not match its sha256"),
    ],
)
def test_an_image_cut_short_where_its_connection_ended_is_never_taken_whole(claims, error):
    """Found by a review with its own Ember: a clip's answer, ended by its connection after
    the first frame and with no sha256, was archived as the whole and Ember's released."""
    with scripted(closing(WHOLE[:200])) as server:
        answer = call(server.url, lambda client: client.fetch("img_1", **claims))

    assert isinstance(answer, EmberBadAnswer), answer
    assert error in answer.message


def test_an_image_whose_connection_ends_it_is_taken_when_its_size_or_sha256_says_whole():
    for claims in ({"size": len(WHOLE)}, {"sha256": hashlib.sha256(WHOLE).hexdigest()}):
        with scripted(closing(WHOLE)) as server:
            answer = call(server.url, lambda client, claims=claims: client.fetch("img_1", **claims))

        assert answer == (WHOLE, "image/png"), (claims, answer)


@pytest.mark.parametrize("status", ["429 Too Many Requests", "503 Service Unavailable"])
@pytest.mark.parametrize("closing", ["close", "reset", "cut"])
def test_a_submit_refused_before_its_body_was_read_is_a_refusal_not_an_unknown(status, closing):
    """Found by a review: a server that answered 429 after the head and closed with the
    photos unread made the rest of the body fail to go, and the refusal was taken for an
    answer lost (`unknown`): an image left `uncertain` for a person, from a busy signal."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    payload = {**PAYLOAD, "prompt": "x" * (8 * 1024 * 1024)}
    read: list[int] = []

    def refuse_early() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            read.append(len(head))
            body = b'{"error": {"code": "busy", "message": "Slow down."}}'
            head = (
                f"HTTP/1.1 {status}\r\nRetry-After: 5\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            # Cut: the body stops short, and the connection is reset (a review's).
            conn.sendall(head.encode() + (body[:5] if closing == "cut" else body))
            if closing in ("reset", "cut"):
                # The answer on its way first: a reset throws away what the server has not
                # sent yet, and an answer that never left says nothing (unknown, rightly).
                time.sleep(0.2)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with listener:
        server = threading.Thread(target=refuse_early)
        server.start()
        error = call(url, lambda client: client.submit(payload))
        server.join(5)

    assert read and read[0] < len(payload["prompt"]), f"the server read {read} bytes"
    assert isinstance(error, EmberBusy), f"{type(error).__name__}: {error}"
    assert (error.status, error.retry_after) == (int(status[:3]), 5.0)
    if closing != "cut":  # cut, the message is lost with the rest of the body
        assert error.message == "Slow down."


def read_request(conn: socket.socket) -> bytes:
    """Read one request's head and body (by its Content-Length); return the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = [
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if b"content-length" in line.lower()
    ]
    while len(body) < (length[0] if length else 0):
        body += conn.recv(65536)
    return head


def test_a_release_on_a_kept_connection_the_server_closed_unread_goes_again_on_a_new_one():
    """Found by a review: a server that closed an idle connection as the release went on it
    (nothing of it read, nothing answered) left the release "unconfirmed" for a person."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    heads: list[tuple[int, bytes]] = []

    def serve() -> None:
        first, _ = listener.accept()
        with first:
            heads.append((1, read_request(first)))
            body = b'{"id": "job_1", "status": "running"}'
            first.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.3)  # the release arrives meanwhile, and is never read
            first.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        second, _ = listener.accept()
        with second:
            heads.append((2, read_request(second)))
            second.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def poll_then_release(client: EmberClient) -> bool:
        await client.poll("job_1")
        return await client.let_go("img_1")

    with listener:
        server = threading.Thread(target=serve)
        server.start()
        released = call(url, poll_then_release)
        server.join(5)

    assert released is True, f"the release was not confirmed: {released!r}"
    assert [(n, head.split(b" ")[0]) for n, head in heads] == [(1, b"GET"), (2, b"PATCH")]
