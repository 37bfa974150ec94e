"""The Ember client against real servers on loopback: what connections do, not what mocks say.

A paid image submit that fails after sending is `uncertain` and needs a person, so a
submit must only ever fail that way when Ember may really have read it. These tests
hold the client to that with servers that close connections and refuse bursts, as
real ones do.
"""

import asyncio
import json
import socket
import socketserver
import threading
import time
from contextlib import AbstractContextManager

import pytest
from asgiref.sync import async_to_sync

from studio.ember import transport
from studio.ember.client import EmberClient, EmberError, Job, Submitted
from studio.ember.errors import EmberUnknownOutcome
from studio.ember.simulator import Simulator
from tests.ember_client.calls import PAYLOAD
from tests.loopback import serving

JOBS = "/api/v1/api-generators/jobs"
CLOSE_AFTER = 0.3  # seconds the test server keeps a connection open after its one answer


class AnswerOnceThenClose(socketserver.StreamRequestHandler):
    """Answer one request with keep-alive advertised, then close the socket shortly after.

    A request sent on the connection in the meantime is never read: to the client it
    looks exactly like a server closing an idle kept-alive connection as it sends.
    """

    server: "OneAnswerServer"

    def handle(self) -> None:
        request_line = self.rfile.readline().decode("latin-1")
        if not request_line:
            return
        method, path, _version = request_line.split(" ", 2)
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        self.rfile.read(length)
        if method == "POST":
            status, body = "202 Accepted", {"id": self.server.new_job(), "status": "queued"}
        else:
            status, body = "200 OK", {"id": path.rsplit("/", 1)[-1], "status": "running"}
        data = json.dumps(body).encode()
        self.wfile.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: keep-alive\r\n"
            "Keep-Alive: timeout=60\r\n\r\n".encode()
            + data
        )
        self.wfile.flush()
        time.sleep(CLOSE_AFTER)


class OneAnswerServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), AnswerOnceThenClose)
        self.jobs: list[str] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def new_job(self) -> str:
        with self._lock:
            self.jobs.append(f"job_{len(self.jobs) + 1}")
            return self.jobs[-1]


def one_answer_server() -> AbstractContextManager[OneAnswerServer]:
    return serving(OneAnswerServer())


async def poll_until_answered(client: EmberClient, job_id: str, tries: int = 3) -> Job:
    """Poll as the worker does: a failed poll is only a reason to poll again."""
    for _ in range(tries - 1):
        try:
            return await client.poll(job_id)
        except EmberError:
            continue
    return await client.poll(job_id)


def test_it_gets_every_submit_answered_by_a_server_that_closes_kept_alive_connections():
    with one_answer_server() as server:

        async def go() -> tuple[list[Submitted], list[Job]]:
            client = EmberClient(base_url=server.url, token="test-token")
            submitted, polled = [], []
            try:
                # Each call goes out at once after the previous answer, while the server
                # still holds that connection open and will never read from it again.
                for _ in range(5):
                    submitted.append(await client.submit(PAYLOAD))
                    polled.append(await poll_until_answered(client, submitted[-1].job_id))
            finally:
                await client.aclose()
            return submitted, polled

        submitted, polled = async_to_sync(go)()

    # Every submit was read and accepted once: none is "unknown outcome".
    assert [s.job_id for s in submitted] == server.jobs == [f"job_{n}" for n in range(1, 6)]
    assert [j.id for j in polled] == server.jobs


def test_it_gets_every_submit_of_a_burst_accepted_by_the_simulator():
    simulator = Simulator(port=0, job_seconds=0).start()

    async def go() -> list[Submitted | BaseException]:
        client = EmberClient(base_url=simulator.url, token="dev-token")
        try:
            # As many fresh connections at once as a busy worker opens.
            return await asyncio.gather(
                *(client.submit(PAYLOAD) for _ in range(100)), return_exceptions=True
            )
        finally:
            await client.aclose()

    try:
        answers = async_to_sync(go)()
    finally:
        simulator.stop()

    refused = [repr(a) for a in answers if not isinstance(a, Submitted)]
    assert refused == []
    assert simulator.state.charges == {PAYLOAD["source_metadata"]["task_id"]: 100}


def test_it_never_reuses_a_kept_alive_connection_the_server_closed_while_idle(monkeypatch):
    # The server closes each connection at once after its answer, keep-alive advertised.
    monkeypatch.setattr(f"{__name__}.CLOSE_AFTER", 0)
    checked: list[bool] = []
    readable = transport.readable

    def seen_readable(sock: socket.socket | None) -> bool:
        checked.append(readable(sock))
        return checked[-1]

    monkeypatch.setattr(transport, "readable", seen_readable)
    with one_answer_server() as server:

        async def go() -> tuple[list[Job], list[bool]]:
            client = EmberClient(base_url=server.url, token="test-token")
            try:
                polled, released = [], []
                for _ in range(3):
                    polled.append(await client.poll("job_1"))  # one try: no retry hides it
                    await asyncio.sleep(0.05)  # the server's close arrives meanwhile
                    # A release on a dead connection would come back unconfirmed.
                    released.append(await client.release("img_1"))
                    await asyncio.sleep(0.05)
                return polled, released
            finally:
                await client.aclose()

        polled, released = async_to_sync(go)()

    assert [j.status for j in polled] == ["running"] * 3
    assert released == [True] * 3
    # The pool's idle check went through the client's own transport and saw each close.
    assert True in checked, f"idle checks through studio.ember.transport: {checked}"


def test_a_socket_is_readable_once_its_peer_wrote_or_closed():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert not transport.readable(ours), "an open, quiet connection can be reused"
        theirs.sendall(b"x")
        assert transport.readable(ours), "bytes nobody asked for: the connection is spoiled"
        ours.recv(1)
        theirs.close()
        assert transport.readable(ours), "the peer closed it"
    assert transport.readable(ours), "a closed socket is never reused"
    assert transport.readable(None)


class Trickle(socketserver.StreamRequestHandler):
    """Read a request, then answer it a byte every 0.2 s: each read is quick, the whole never."""

    def handle(self) -> None:
        length = 0
        self.rfile.readline()
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        self.rfile.read(length)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
        try:
            self.wfile.write(head)
            for _ in range(4096):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return  # the client gave up, as it should


@pytest.mark.parametrize("route", ["submit", "poll", "fetch", "history"])
def test_an_answer_that_trickles_in_ends_at_the_exchanges_deadline(monkeypatch, route):
    """Found by a review: one byte every 5 s kept a task `copying` (or `submitting`) for hours.

    Each read arrives well within the read timeout, so only a deadline on the whole
    exchange ends it; a submit's then counts as "may have arrived".
    """
    from studio.ember import client as ember_client

    monkeypatch.setattr(ember_client, "DEADLINE", 1.0)
    monkeypatch.setattr(ember_client, "DEADLINES", {"submit": 1.0, "fetch": 1.0})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    calls = {
        "submit": lambda c: c.submit(PAYLOAD),
        "poll": lambda c: c.poll("job_1"),
        "fetch": lambda c: c.fetch("img_1"),
        "history": lambda c: c.history("5a1b5a1b-0000-4000-8000-000000000000"),
    }

    async def call() -> EmberError:
        client = EmberClient(base_url=f"http://127.0.0.1:{server.server_address[1]}", token="t")
        try:
            await calls[route](client)
        except EmberError as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("the call returned")

    started = time.perf_counter()
    try:
        error = async_to_sync(call)()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    seconds = time.perf_counter() - started

    assert seconds < 3, f"the {route} took {seconds:.1f} s (deadline 1 s)"
    assert isinstance(error, EmberUnknownOutcome) and error.may_have_arrived
    assert "within 1 s" in error.message
