"""uvicorn's HTTP/1.1 protocol, with time limits on a request's head and on a stalled answer,
and a cap on connections.

uvicorn waits for a request's line and headers as long as they take: a review opened
20,000 connections that each sent half a request line and held them. The web process
ran out of file descriptors (its log grew by 200 MB in 30 s, one line a refused accept),
and no one's request was answered until the connections closed. The body was already
bounded (`bodylimit`); the head was not, nor an answer its client never reads. Here:

- a request's head must arrive within `AVATARS_HEAD_SECONDS` (10 by default) of the
  connection opening or of the answer before it; past that, a connection that sent part
  of a head is answered 408 and closed, one that sent nothing is closed;
- an answer whose client stops reading is given up (the connection aborted) once
  nothing of it has been taken for `AVATARS_SEND_STALL_SECONDS` (30): a second review
  held every slot with clients that asked for pages and never read them;
- at most `AVATARS_MAX_CONNECTIONS` connections are open at once (by default 1,000, and
  never more than a quarter of what the process's file-descriptor limit leaves beside
  the listen backlog): one past that is answered 503 and closed as soon as it is
  accepted, so the process keeps the descriptors it needs for its own files;
- a head larger than `HEAD_MAX` is answered 431, and any other request uvicorn cannot
  parse 400, both in the API's error shape;
- the log lines a stranger can cause at will (an unparsable request, a refused accept, a
  connection past the cap) are written at most once a minute each, with how many were
  left out.

Served with `uvicorn --http avatars.heads:TimedHeads` (`studio/serving.py`, and
docs/operations.md). Nothing here needs Django's settings: uvicorn loads it before the app.
"""

import asyncio
import json
import logging
import math
import resource
import sys
import time
from typing import Any

import h11
from django.core.exceptions import ImproperlyConfigured
from uvicorn.protocols.http.h11_impl import H11Protocol

from avatars.env import env_float, env_int

try:
    HEAD_SECONDS = env_float("AVATARS_HEAD_SECONDS", 10.0, minimum=0.1)
    SEND_STALL_SECONDS = env_float("AVATARS_SEND_STALL_SECONDS", 30.0, minimum=1.0)
    MAX_CONNECTIONS = env_int("AVATARS_MAX_CONNECTIONS", 1000, minimum=1)
except ImproperlyConfigured as exc:  # the sentence, not a traceback through uvicorn's import
    sys.exit(f"Avatars cannot start: {exc}")
HEAD_MAX = 64 * 1024  # bytes of a request's line and headers: cookies of a busy site fit
HEAD_TOO_SLOW = "The request's headers did not arrive in time."
HEAD_TOO_LARGE = f"The request's headers are too large: at most {HEAD_MAX // 1024} KB."
UNREADABLE = "The request could not be read as HTTP/1.1."
TOO_MANY = "The server has as many connections open as it takes: try again in a moment."
WARN_EVERY = 60.0  # seconds between two log lines of one kind a stranger can cause
LINGER_SECONDS = 1.0  # a refused head's connection reads and drops this long before closing

logger = logging.getLogger("avatars.heads")


class OncePerMinute(logging.Filter):
    """Let through one record a minute of each message it names; say how many it held back."""

    def __init__(self, *messages: str) -> None:
        super().__init__()
        self.messages = messages
        self.last: dict[str, float] = {}
        self.held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        kind = next((m for m in self.messages if said.startswith(m)), None)
        if kind is None:
            return True
        now = time.monotonic()
        if now - self.last.get(kind, -math.inf) < WARN_EVERY:
            self.held[kind] = self.held.get(kind, 0) + 1
            return False
        self.last[kind], held = now, self.held.pop(kind, 0)
        if held:
            record.msg = f"{said} ({held} more like it in the minute before, not logged)"
            record.args = ()
        return True


logging.getLogger("uvicorn.error").addFilter(
    OncePerMinute("Invalid HTTP request received.", "Unsupported upgrade request.")
)
logging.getLogger("asyncio").addFilter(OncePerMinute("socket.accept() out of system resource"))
logger.addFilter(OncePerMinute("Closed a new connection"))


def connection_cap(backlog: int) -> int:
    """Return how many connections may be open at once: a quarter of the descriptors the
    listen backlog leaves (asyncio accepts up to a backlog's worth before any is refused)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, (soft - backlog) // 4))


def error_answer(status: int, reason: str, code: str, message: str, *extra: str) -> bytes:
    """Return a whole HTTP/1.1 answer in the API's error shape that closes the connection."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = "".join(
        (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n",
            "".join(f"{line}\r\n" for line in extra),
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n",
        )
    )
    return head.encode("ascii") + body


class TimedHeads(H11Protocol):
    """H11Protocol whose connections wait a bounded time for a head and for their reader."""

    caps: dict[int, int] = {}  # by listen backlog

    head_timer: asyncio.TimerHandle | None = None
    stall_timer: asyncio.TimerHandle | None = None
    head_bytes = 0  # bytes of the head now awaited, seen so far
    head_tail = b""  # its last 3 bytes: where a head's end may begin
    refusal_hint = 400  # the status h11 suggested for the last request it could not parse
    refused = False  # a head was refused: its answer is out, the rest of it read and dropped

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_MAX)
        parse = self.conn.next_event

        def next_event() -> Any:
            try:
                return parse()
            except h11.RemoteProtocolError as exc:
                self.refusal_hint = exc.error_status_hint
                raise

        self.conn.next_event = next_event  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        backlog = self.config.backlog
        cap = self.caps.setdefault(backlog, connection_cap(backlog))
        if len(self.connections) > cap:
            logger.warning(
                "Closed a new connection: %d are open, the most this process takes "
                "(AVATARS_MAX_CONNECTIONS, and a quarter of its file descriptors).",
                cap,
            )
            transport.write(
                error_answer(503, "Service Unavailable", "busy", TOO_MANY, "retry-after: 1")
            )
            transport.close()
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(self.head_timer)
        self._stop(self.stall_timer)
        self.head_timer = self.stall_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # what follows a refused head is read and dropped until the close
        if self.head_timer is not None and self._head_too_large(data):
            self.refusal_hint = 431
            self.send_400_response("")
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._stop(self.head_timer)  # the head is in: the body has limits of its own
            self.head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            if self.transport.get_write_buffer_size():
                self._watch_reader()  # closing once its reader takes the rest, if ever
        elif self.conn.their_state is h11.IDLE:
            self._await_head()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_reader()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop(self.stall_timer)
        self.stall_timer = None

    def send_400_response(self, msg: str) -> None:
        """Answer a request that is not HTTP/1.1 as the API answers errors, and close."""
        self._stop(self.head_timer)
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self.refusal_hint == 431:
            answer = error_answer(
                431, "Request Header Fields Too Large", "too_large", HEAD_TOO_LARGE
            )
        else:
            answer = error_answer(400, "Bad Request", "invalid_request", UNREADABLE)
        self.transport.write(answer)
        # Closing while the client still sends would reset the connection, and a reset
        # drops the answer before it is read (a re-review saw resets, not the 400): the
        # answer goes out with the end of our side, the rest of the head is read and
        # dropped, and the connection is closed a moment later.
        self.refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _head_too_large(self, data: bytes) -> bool:
        """Count `data` into the head awaited; say whether that head passes HEAD_MAX.

        h11 refuses a head past its limit only while the head is incomplete: one that came
        whole in a single read passed at any size (a re-review's 100 KB).
        """
        before, seen = self.head_bytes, self.head_tail + data
        self.head_bytes += len(data)
        self.head_tail = seen[-3:]
        if self.head_bytes <= HEAD_MAX:
            return False
        end = seen.find(b"\r\n\r\n")  # the head's end, perhaps begun in the read before
        return end == -1 or before - (len(seen) - len(data)) + end + 4 > HEAD_MAX

    def _await_head(self) -> None:
        self._stop(self.head_timer)
        # Bytes of the next head may have come with the request before (pipelined).
        pending = self.conn.trailing_data[0]
        self.head_bytes, self.head_tail = len(pending), bytes(pending[-3:])
        self.head_timer = self.loop.call_later(HEAD_SECONDS, self._head_too_slow)

    def _watch_reader(self) -> None:
        if self.stall_timer is None:
            self.stall_timer = self.loop.call_later(SEND_STALL_SECONDS, self._reader_gone)

    @staticmethod
    def _stop(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.head_bytes:
            self.transport.write(error_answer(408, "Request Timeout", "too_slow", HEAD_TOO_SLOW))
        self.transport.close()

    def _reader_gone(self) -> None:
        """Give up an answer nothing of which was read for SEND_STALL_SECONDS."""
        self.stall_timer = None
        if self.flow.write_paused or self.transport.is_closing():
            self.transport.abort()
