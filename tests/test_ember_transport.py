"""The Ember client's own transport (studio/ember/transport.py) on real loopback sockets.

It keeps idle connections for polls, fetches and releases (never for a submit),
reuses none that the server closed, asked to close or left idle too long, sends
bodies byte for byte, and speaks TLS with the machine's trusted certificates.
"""

import asyncio
import hashlib
import json
import socketserver

import pytest
from asgiref.sync import async_to_sync

from studio.ember import transport
from studio.ember.client import EmberClient
from studio.ember.errors import EmberUnavailable
from tests.ember_client.calls import PAYLOAD
from tests.scripted_ember import TLS, Request, accepted, call, reply, scripted, server_tls


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
