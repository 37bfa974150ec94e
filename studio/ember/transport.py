"""Ember's connections: HTTP/1.1 over asyncio streams for the Ember client (docs/design.md §6.5).

httpx's own pool (httpcore) looks at every connection it holds as each request is
placed and as each ends, and builds a few dozen objects a request; at 64 slots
that was most of the worker's CPU. This transport does only what the Ember client
needs: it takes an `httpx.Request` and gives back an `httpx.Response` whose body is
read as it is iterated; one request at a time per connection, framed by h11 (the
parser httpx itself uses); idle connections kept last-in, first-out, not reading,
each reused only if nothing arrived on it since its answer ended (`Connection.fit`),
none looked at otherwise.

What a failure proves is what the client's `_exchange` reads from its type: only
`httpx.ConnectError`/`ConnectTimeout` say the request never left; anything that
goes wrong once a connection is open is a `WriteError`, `ReadError`, timeout or
`RemoteProtocolError`, which say it may have arrived; unless an answer arrived before
the request was whole (a server refusing early), which says what became of it.
"""

import asyncio
import contextlib
import select
import socket
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import h11
import httpx

READ_SIZE = 64 * 1024  # bytes asked of the socket at a time
COALESCE = 64 * 1024  # bytes: a body up to this size is sent in one write with its head
KEEP_IDLE = 5.0  # seconds an idle connection may wait to be reused (httpx's default)
PORTS = {"http": 80, "https": 443}
MAX_INTERIM = 8  # interim answers (1xx, "102 Processing") read before an answer's own head

Origin = tuple[str, str, int]

TOO_MANY_INTERIM = f"Ember sent more than {MAX_INTERIM} interim answers (1xx) before its answer."


def readable(sock: socket.socket | None) -> bool:
    """Return whether a read on `sock` would not block (data, or the peer's close).

    An idle connection the server wrote to or closed must not carry another request.
    """
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Connection:
    """One HTTP/1.1 connection: a stream pair and h11's view of it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0  # time.monotonic() it was last given back
        self.heard = False  # whether any byte of the current exchange's answer was read

    @property
    def _transport(self) -> asyncio.Transport:
        return cast(asyncio.Transport, self.writer.transport)

    @property
    def socket(self) -> socket.socket | None:
        return self.writer.get_extra_info("socket")

    async def send(self, request: httpx.Request, seconds: float | None) -> None:
        """Write the request, head and body; WriteError/WriteTimeout when it cannot.

        A head and a small body go out in one write (each write is a system call, and
        on loopback the receiver's work with it); a large body is written as it is,
        never copied.
        """
        head = h11.Request(
            method=request.method,
            target=request.url.raw_path,
            headers=request.headers.raw,
        )
        queued: list[bytes] = []
        try:
            async with asyncio.timeout(seconds):
                self._queue(queued, head)
                async for chunk in request.stream:  # type: ignore[union-attr]
                    if self._queue(queued, h11.Data(data=chunk)):
                        await self.writer.drain()
                self._queue(queued, h11.EndOfMessage())
                self.writer.write(b"".join(queued))
                await self.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("Writing the request timed out.", request=request) from exc
        except (OSError, h11.LocalProtocolError) as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc

    def _queue(self, queued: list[bytes], event: h11.Event) -> bool:
        """Frame `event` after `queued`; write out what is queued once a large piece comes.

        Return whether anything was written (the caller then waits for the socket).
        """
        wrote = False
        for piece in self.h11.send_with_data_passthrough(event) or ():
            if len(piece) <= COALESCE:
                queued.append(piece)
                continue
            if queued:
                self.writer.write(b"".join(queued))
                queued.clear()
            self.writer.write(piece)
            wrote = True
        return wrote

    async def next_event(self, seconds: float | None, request: httpx.Request) -> h11.Event:
        """Return the answer's next event, reading as needed; ReadError/ReadTimeout/protocol."""
        try:
            while True:
                event = self.h11.next_event()
                if event is not h11.NEED_DATA:
                    return event  # type: ignore[return-value]
                async with asyncio.timeout(seconds):
                    data = await self._read()
                self.h11.receive_data(data)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("Reading the answer timed out.", request=request) from exc
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc

    async def _read(self) -> bytes:
        """Read what arrived, even on a connection that failed since (see `answered`)."""
        reader = self.reader
        ahead = reader._buffer  # type: ignore[attr-defined]
        if ahead and reader.exception() is not None:  # read() would raise, dropping these
            data = bytes(ahead)
            ahead.clear()
        else:
            data = await reader.read(READ_SIZE)
        self.heard = self.heard or bool(data)
        return data

    def answered(self) -> bool:
        """Say whether the server sent anything back while the request was being written.

        A server may answer before it has read a whole request, a refusal most often (429,
        503, 413), and close: the rest of the request then fails to go, but its answer
        arrived and says what became of it (a review's 429 was taken for an answer lost,
        and its image left for a person to reconcile).
        """
        return bool(self.reader._buffer)  # type: ignore[attr-defined]

    def reusable(self) -> bool:
        """Say whether the exchange ended cleanly: both messages whole, nothing after them.

        Bytes past the answer's end (a second answer, a body longer than declared) would
        be read as the next request's answer; the server asked to close: not reusable.
        """
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            return False
        if self.h11.trailing_data != (b"", False):
            return False
        self.h11.start_next_cycle()
        return True

    def rest(self) -> None:
        """Stop reading while idle: whatever arrives stays on the socket, where `fit` sees it."""
        self.idle_since = time.monotonic()
        self._transport.pause_reading()

    def fit(self) -> bool:
        """Say whether nothing arrived since the answer ended, and the server did not close.

        asyncio reads ahead into the stream's buffer (`_buffer`, which it has kept since
        3.4) until `rest`; after, poll(2) on the socket says (or, over TLS, the
        transport's buffer of records not yet read).
        """
        reader = self.reader
        ahead = len(reader._buffer)  # type: ignore[attr-defined]
        # Over TLS the transport still reads while paused, into its own buffer of records.
        held = getattr(self._transport, "get_read_buffer_size", lambda: 0)()
        if reader.exception() is not None or reader.at_eof() or ahead or held:
            return False
        return not readable(self.socket)

    def wake(self) -> None:
        """Read again, for the request about to be sent."""
        self.heard = False
        self._transport.resume_reading()

    def close(self) -> None:
        """Close at once: unsent bytes (a stuck submit's photos) are dropped, not kept to send."""
        self._transport.abort()


class Body(httpx.AsyncByteStream):
    """An answer's body, read as it is iterated; gives its connection back when closed."""

    def __init__(
        self, transport: "Transport", origin: Origin, connection: Connection, request: httpx.Request
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: Connection | None = connection
        self._request = request
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            raise httpx.StreamClosed()
        timeout = _timeouts(self._request).get("read")
        try:
            while True:
                event = await connection.next_event(timeout, self._request)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._ended = True
                    return
                else:
                    raise httpx.RemoteProtocolError(
                        f"Unexpected {type(event).__name__} in an answer.", request=self._request
                    )
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport.give_back(self._origin, connection, ended=self._ended)


class Transport(httpx.AsyncBaseTransport):
    """Connections to Ember: kept alive up to `keep` idle per origin (0: one per request)."""

    def __init__(self, *, keep: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self.keep = keep
        self._ssl = ssl_context
        self._idle: dict[Origin, list[Connection]] = {}
        self._open: set[Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or PORTS.get(url.scheme, 80))
        kept = self._reuse(origin)
        try:
            connection = kept or await self._connect(origin, request)
            event = await self._answer(connection, request)
        except (httpx.WriteError, httpx.ReadError, httpx.RemoteProtocolError):
            if kept is None or kept.heard:
                raise
            # A kept-alive connection the server closed as the request went (its idle
            # timeout): nothing of an answer came, and what was sent met a closed socket.
            # Once more on a new connection, as browsers do; only a request that may go
            # twice rides a kept one (polls, fetches, the release: never a paid submit).
            # A review's releases were "unconfirmed" for a person to ask again.
            connection = await self._connect(origin, request)
            event = await self._answer(connection, request)
        return httpx.Response(
            event.status_code,
            headers=event.headers.raw_items(),
            stream=Body(self, origin, connection, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    async def _answer(self, connection: Connection, request: httpx.Request) -> h11.Response:
        """Send `request` on `connection` and read its answer's head; forget it on failure."""
        try:
            try:
                await connection.send(request, _timeouts(request).get("write"))
            except (httpx.WriteError, httpx.WriteTimeout):
                if not connection.answered():
                    raise
            read = _timeouts(request).get("read")
            event = await connection.next_event(read, request)
            for _ in range(MAX_INTERIM):  # an endless stream of them would hold a core
                if not isinstance(event, h11.InformationalResponse):
                    break
                event = await connection.next_event(read, request)
            if isinstance(event, h11.InformationalResponse):
                raise httpx.RemoteProtocolError(TOO_MANY_INTERIM, request=request)
            if not isinstance(event, h11.Response):
                raise httpx.RemoteProtocolError("Ember closed without answering.", request=request)
        except BaseException:
            self._forget(connection)
            raise
        return event

    def _reuse(self, origin: Origin) -> Connection | None:
        """Return the idle connection last given back, if one is fit to carry a request."""
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if time.monotonic() - connection.idle_since <= KEEP_IDLE and connection.fit():
                connection.wake()
                return connection
            self._forget(connection)
        return None

    async def _connect(self, origin: Origin, request: httpx.Request) -> Connection:
        """Open a connection; ConnectError/ConnectTimeout when none opens (nothing was sent)."""
        scheme, host, port = origin
        tls = self._ssl if scheme == "https" else None
        try:
            async with asyncio.timeout(_timeouts(request).get("connect")):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=READ_SIZE
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("Connecting to Ember timed out.", request=request) from exc
        except OSError as exc:  # refused, unreachable, unresolvable, a TLS handshake refused
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(reader, writer)
        self._open.add(connection)
        return connection

    def give_back(self, origin: Origin, connection: Connection, *, ended: bool) -> None:
        """Keep a connection whose exchange ended cleanly for the next request; close others."""
        idle = self._idle.setdefault(origin, [])
        if ended and len(idle) < self.keep and connection.reusable():
            connection.rest()
            idle.append(connection)
        else:
            self._forget(connection)

    def drop_idle(self) -> None:
        """Close every idle connection (one may be out of step with its server)."""
        idle = [connection for kept in self._idle.values() for connection in kept]
        self._idle.clear()
        for connection in idle:
            self._forget(connection)

    def _forget(self, connection: Connection) -> None:
        self._open.discard(connection)
        connection.close()

    async def aclose(self) -> None:
        connections, self._open = list(self._open), set()
        self._idle.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            with contextlib.suppress(Exception):
                await connection.writer.wait_closed()


def _timeouts(request: httpx.Request) -> dict[str, Any]:
    return request.extensions.get("timeout", {})
