"""The Ember client's connection pool holds as many requests in flight as the worker has slots."""

import asyncio
import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from asgiref.sync import async_to_sync

from studio.ember.client import EmberClient, EmberError, Job

SLOTS = 120  # more than httpx's default pool of 100 connections


class AllAtOnce(BaseHTTPRequestHandler):
    """Answer a poll only once SLOTS polls are in flight together."""

    protocol_version = "HTTP/1.1"
    server: "AllAtOnceServer"

    def do_GET(self) -> None:
        # Answered anyway when the barrier breaks: the test counts what arrived together.
        with contextlib.suppress(threading.BrokenBarrierError):
            self.server.barrier.wait()
        data = json.dumps({"id": self.path.rsplit("/", 1)[-1], "status": "running"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class AllAtOnceServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), AllAtOnce)
        self.barrier = threading.Barrier(SLOTS, timeout=3)


def test_it_keeps_as_many_polls_in_flight_as_the_worker_has_slots():
    server = AllAtOnceServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def go() -> list[Job | BaseException]:
        client = EmberClient(base_url=url, token="test-token", slots=SLOTS)
        try:
            polls = (client.poll(f"job_{n}") for n in range(SLOTS))
            return await asyncio.gather(*polls, return_exceptions=True)
        finally:
            await client.aclose()

    try:
        answers = async_to_sync(go)()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    assert not server.barrier.broken, "the polls never were all in flight at once"
    failed = [a for a in answers if isinstance(a, (EmberError, BaseException))]
    assert failed == []
