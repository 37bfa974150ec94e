"""uvicorn's HTTP/1.1 protocol, with a time limit on a request's head and a cap on connections.

uvicorn waits for a request's line and headers as long as they take: a review opened
20,000 connections that each sent half a request line and held them. The web process
ran out of file descriptors (its log grew by 200 MB in 30 s, one line a refused accept),
and no one's request was answered until the connections closed. The body was already
bounded (`bodylimit`); the head was not. Here:

- a request's head must arrive within `AVATARS_HEAD_SECONDS` (10 by default) of the
  connection opening or of the answer before it; past that, a connection that sent part
  of a head is answered 408 and closed, one that sent nothing is closed;
- at most `AVATARS_MAX_CONNECTIONS` connections are open at once (by default 1,000, and
  never more than a quarter of the process's file-descriptor limit): one past that is
  closed as soon as it is accepted, so the process keeps the descriptors it needs for
  its own files and the connections it serves;
- a request uvicorn cannot parse gets the API's error shape, not a plain-text line.

Served with `uvicorn --http avatars.heads:TimedHeads` (`studio/serving.py`, and
docs/operations.md). Nothing here imports Django: uvicorn loads it before the app.
"""

import asyncio
import json
import logging
import os
import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_SECONDS = float(os.environ.get("AVATARS_HEAD_SECONDS", "10"))
MAX_CONNECTIONS = int(os.environ.get("AVATARS_MAX_CONNECTIONS", "1000"))
HEAD_TOO_SLOW = "The request's headers did not arrive in time."
UNREADABLE = "The request could not be read as HTTP/1.1."
WARN_EVERY = 60.0  # seconds: one line about refused connections a minute, not one each

logger = logging.getLogger("avatars.heads")


def connection_cap() -> int:
    """Return how many connections may be open at once (a quarter of the descriptors at most)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft // 4))


def error_answer(status: int, reason: str, code: str, message: str) -> bytes:
    """Return a whole HTTP/1.1 answer in the API's error shape that closes the connection."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class TimedHeads(H11Protocol):
    """H11Protocol whose connections wait a bounded time for each request's head."""

    cap = connection_cap()
    last_warning = 0.0

    head_timer: asyncio.TimerHandle | None = None
    head_bytes = 0  # bytes of the head now awaited, seen so far

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.cap:
            self._warn_refused()
            transport.abort()  # no answer: that would be work for a connection too many
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.head_timer is not None:
            self.head_bytes += len(data)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._stop_head_timer()  # the head is in: the body has limits of its own

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()

    def send_400_response(self, msg: str) -> None:
        """Answer a request that is not HTTP/1.1 as the API answers errors, and close."""
        self._stop_head_timer()
        if self.transport.is_closing():
            return
        self.transport.write(error_answer(400, "Bad Request", "invalid_request", UNREADABLE))
        self.transport.close()

    def _await_head(self) -> None:
        self._stop_head_timer()
        self.head_bytes = 0
        self.head_timer = self.loop.call_later(HEAD_SECONDS, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.head_bytes:
            self.transport.write(error_answer(408, "Request Timeout", "too_slow", HEAD_TOO_SLOW))
        self.transport.close()

    def _warn_refused(self) -> None:
        now = time.monotonic()
        if now - TimedHeads.last_warning >= WARN_EVERY:
            TimedHeads.last_warning = now
            logger.warning(
                "Closed a new connection: %d are open, the most this process takes "
                "(AVATARS_MAX_CONNECTIONS, and a quarter of its file descriptors).",
                len(self.connections) - 1,
            )
