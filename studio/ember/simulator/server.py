"""Serve the simulator over HTTP/1.1: the socket handler, the threading server, `Simulator`."""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from studio.ember.simulator.ledger import StateFile
from studio.ember.simulator.routes import dispatch
from studio.ember.simulator.state import SimulatorState
from studio.ember.simulator.wire import ApiError, Request, Response, error_response

log = logging.getLogger("studio.ember.simulator")

MAX_BODY_BYTES = 64 * 1024 * 1024
STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    414: "uri_too_long",
    431: "headers_too_large",
    501: "not_implemented",
}


class _Handler(BaseHTTPRequestHandler):
    """Translate between HTTP/1.1 on the socket and dispatch()."""

    protocol_version = "HTTP/1.1"
    server_version = "EmberSimulator/1.0"
    # An idle keep-alive connection would otherwise pin its thread forever.
    timeout = 60
    server: _EmberServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two small writes: without this, Nagle's algorithm
        # holds the body until the client's delayed ACK (~40 ms on every answer).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_OPTIONS = do_GET

    def _handle(self) -> None:
        try:
            self._send(self._respond())
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer; there is nobody left to tell.
            self.close_connection = True

    def _respond(self) -> Response:
        try:
            body = self._read_body()
        except ApiError as exc:
            # An unread or unreadable body leaves the stream out of sync; end the connection.
            self.close_connection = True
            return exc.response()
        parts = urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.command, parts.path, parts.query, headers, body)
        response = dispatch(self.server.state, request)
        return self._kept(response)

    def _kept(self, response: Response) -> Response:
        """Return `response` once what it answers about is in the state file, if there is one.

        Ember answers a submit, a poll that finished a job or a release only once it has
        recorded it. A state that could not be saved is answered with no answer at all,
        which a client must treat as an outcome it does not know (never as a refusal).
        """
        kept = self.server.state_file
        if kept is None:
            return response
        state = self.server.state
        try:
            kept.save(state.changes, state.snapshot)
        except OSError as exc:
            log.error("the state file %s could not be saved: %s", kept.path, exc)
            return Response(status=503, drop=True)
        return response

    def _read_body(self) -> bytes:
        """Read the whole request body (Content-Length or chunked)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        if not raw.strip().isdigit():
            raise ApiError(400, "invalid_request", "Content-Length must be a non-negative integer.")
        length = int(raw)
        if length > MAX_BODY_BYTES:
            raise ApiError(413, "payload_too_large", "The request body is too large.")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        """Decode a chunked request body."""
        parts: list[bytes] = []
        total = 0
        while True:
            size_text = self.rfile.readline(1024).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ApiError(400, "invalid_request", "Malformed chunked body.") from None
            if size == 0:
                break
            total += size
            if total > MAX_BODY_BYTES:
                raise ApiError(413, "payload_too_large", "The request body is too large.")
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)
        while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
            pass  # Trailers carry nothing we use, but must be consumed.
        return b"".join(parts)

    def _send(self, response: Response, *, include_body: bool = True) -> None:
        """Write a response with an exact Content-Length, or drop the connection."""
        if response.drop:
            self._drop()
            return
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not include_body:
            return
        if response.body_delay > 0:
            time.sleep(response.body_delay)
        self.wfile.write(response.body)

    def _drop(self) -> None:
        """Close the socket without a byte of answer, as a dropped connection would."""
        self.close_connection = True
        # The peer may already be gone; ending the connection is all that matters.
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer protocol-level errors in the contract's JSON shape, not the stdlib HTML."""
        phrase = self.responses.get(code, ("Error", ""))[0]
        response = error_response(code, STATUS_CODES.get(code, f"http_{code}"), message or phrase)
        self.close_connection = True
        self._send(response, include_body=getattr(self, "command", None) != "HEAD")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


class _EmberServer(ThreadingHTTPServer):
    """Carry the shared state to handlers; one daemon thread per connection."""

    daemon_threads = True
    # socketserver listens with a backlog of 5. Every paid submit opens a fresh
    # connection, so a burst of them overflows that queue; the kernel then answers
    # with SYN cookies and later resets connections whose request it never handed
    # to us. The client sees "reset after sending", which for a paid image means
    # `uncertain`, although Ember never read the request. Real servers listen
    # with a deep backlog (uvicorn and gunicorn: 2048); so does this stand-in.
    request_queue_size = 2048

    def __init__(
        self,
        address: tuple[str, int],
        state: SimulatorState,
        verbose: bool,
        state_file: StateFile | None = None,
    ) -> None:
        self.state = state
        self.verbose = verbose
        self.state_file = state_file
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Say a connection its client dropped in one line; any other error in full.

        A worker killed mid-request put a whole traceback into the demo's output (a review).
        """
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionResetError | BrokenPipeError):
            log.info("a client dropped its connection (%s)", error)
            return
        super().handle_error(request, client_address)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn) that can stall startup.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class Simulator:
    """Run the Ember simulator in this process; the socket is bound on construction."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str = "dev-token",
        job_seconds: float = 2.0,
        verbose: bool = False,
        state_file: Path | None = None,
    ) -> None:
        self.state = SimulatorState(token=token, job_seconds=job_seconds)
        self.state_file = None if state_file is None else StateFile(state_file)
        if self.state_file is not None and (saved := self.state_file.load()) is not None:
            self.state.restore(*saved)
        self._server = _EmberServer((host, port), self.state, verbose, self.state_file)
        self._thread: threading.Thread | None = None
        self._serving = False

    @property
    def url(self) -> str:
        """Return the base URL with the port actually bound (useful with port=0)."""
        raw_host, port = self._server.server_address[:2]
        host = raw_host.decode() if isinstance(raw_host, bytes) else str(raw_host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> Simulator:
        """Serve in a daemon thread and return self, so Simulator(...).start() reads well."""
        if self._thread is None:
            self._serving = True
            self._thread = threading.Thread(
                target=self.serve_forever, name="ember-simulator", daemon=True
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until stop() is called from another thread."""
        self._serving = True
        self._server.serve_forever(poll_interval=0.1)

    def stop(self) -> None:
        """Stop serving, close the listening socket and wait for the serving thread."""
        if self._serving:
            # Shutdown() blocks until serve_forever() runs, so only call it once serving.
            self._server.shutdown()
            self._serving = False
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.state.close()
        if self.state_file is not None:
            self.state_file.save(self.state.changes, self.state.snapshot)
