"""A scripted Ember on loopback for the client's connection tests: it reads each request
and answers as told, counting connections and keeping what it read."""

import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync

from studio.ember.client import EmberClient
from studio.ember.errors import EmberError
from tests.loopback import serving

# A certificate for 127.0.0.1 (valid until 2126) and its key, for an Ember over TLS;
# `untrusted.pem` is another, which no client is told to trust.
TLS = Path(__file__).resolve().parent / "tls"
Answer = Callable[[socketserver.StreamRequestHandler, "Request"], bool]


class Request:
    """One request as the server read it."""

    def __init__(self, line: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, _version = line.split(" ", 2)
        self.headers = headers
        self.body = body


class Scripted(socketserver.ThreadingTCPServer):
    """A server that reads each request and answers it with `answer` (False: hang up)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: Answer, *, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answer = answer
        self.tls = tls
        self.requests: list[Request] = []
        self.connections = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is None:
            return sock, address
        sock.settimeout(5)
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class Handler(socketserver.StreamRequestHandler):
    server: Scripted

    def handle(self) -> None:
        with self.server.lock:
            self.server.connections += 1
        if self.server.tls is not None:
            try:
                self.connection.do_handshake()
            except (OSError, ssl.SSLError):
                return  # a client that does not trust the certificate hangs up here
        while line := self.rfile.readline().decode("latin-1").strip():
            headers = {}
            while (raw := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = raw.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            body = self.rfile.read(int(headers.get("content-length", "0")))
            request = Request(line, headers, body)
            with self.server.lock:
                self.server.requests.append(request)
            if not self.server.answer(self, request):
                return


def reply(
    handler: socketserver.StreamRequestHandler, status: str, body: bytes, **extra: str
) -> bool:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in extra.items())
    handler.wfile.write(head.encode() + b"\r\n" + body)
    handler.wfile.flush()
    return True


def accepted(handler: socketserver.StreamRequestHandler, request: Request) -> bool:
    if request.method == "POST":
        return reply(handler, "202 Accepted", b'{"id": "job_1", "status": "queued"}')
    return reply(handler, "200 OK", b'{"id": "job_1", "status": "running"}')


def scripted(
    answer: Answer, *, tls: ssl.SSLContext | None = None
) -> AbstractContextManager[Scripted]:
    return serving(Scripted(answer, tls=tls))


def server_tls(name: str = "ember") -> ssl.SSLContext:
    """Return a server's TLS context with the certificate `TLS/<name>.pem` (key beside it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS / f"{name}.pem", TLS / f"{name}.key")
    return context


def call(url: str, action: Callable[[EmberClient], Any], *, slots: int = 0) -> Any:
    """Run `action` with a fresh client on `url`; return its result or the EmberError raised."""

    async def go() -> Any:
        client = EmberClient(base_url=url, token="test-token", slots=slots)
        try:
            return await action(client)
        except EmberError as exc:
            return exc
        finally:
            await client.aclose()

    return async_to_sync(go)()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def error_then(
    first: Callable[[EmberClient], Any], then: Callable[[EmberClient], Any]
) -> Callable[[EmberClient], Any]:
    """Return an action for `call`: `first` must fail with an EmberError, then `then` runs
    on the same client; it gives (that error, what `then` returned)."""

    async def both(client: EmberClient) -> tuple[EmberError, Any]:
        try:
            await first(client)
        except EmberError as exc:
            return exc, await then(client)
        raise AssertionError("the first call returned")

    return both
