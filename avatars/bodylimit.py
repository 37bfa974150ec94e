"""Refuse request bodies before they are read: the ASGI door in front of Django.

Django reads a whole body (spooling it to a temporary file) before any view or
authentication runs, so without this a stranger's 300 MB POST would be written to disk
before its 401. Here, before the body is read:

- an API request that carries a body but no valid token is answered 401; with a token,
  404 for a path the API does not have and 405 for a method its route does not take,
  and a read-only token's write 403 (every API write carries a body or none at all):
  as its route would answer, whatever the body's size;
- a `Content-Length` over the body's limit is answered 413 at once, naming the limit: for
  an upload (a multipart form) `AVATARS_MAX_BODY_BYTES`, for anything else (JSON, a form's
  fields) Django's `DATA_UPLOAD_MAX_MEMORY_SIZE`, which Django itself checks only when a
  length is given. A signed-in person's upload to a studio page is answered with a small
  page of the studio that leads back; the API answers JSON, and a reference photo's API
  upload 400 `too_large`, as the store answers a large file;
- a studio request from someone not signed in (no session of a signed-in user) may
  carry at most `AVATARS_ANONYMOUS_BODY_BYTES` (a sign-in form is a few hundred bytes),
  and must send it within `AVATARS_ANONYMOUS_BODY_SECONDS`;
- a request with both a `Content-Length` and a `Transfer-Encoding` is answered 400 and
  its connection closed, unread (what follows it on the connection is not answered);
- an upload (a multipart form) without a length (chunked) is answered 411: Django reads
  such a form as empty, so a valid photo would be "missing" and a studio form would lose
  its CSRF token; browsers and HTTP clients send a form's length anyway;
- at most `AVATARS_UPLOAD_BODIES_AT_ONCE` uploads (POSTs from a signed-in person or a
  token) are read at once; more wait unread, and one still waiting after
  `AVATARS_BODY_IDLE_SECONDS` is answered 503 (avatars/upload_bodies.py);
- any other body without a length is counted as it streams and cut off with a 413 as
  soon as it passes its limit;
- a body that stops arriving for `AVATARS_BODY_IDLE_SECONDS` is answered 408: a client
  that trickles its body holds a connection, not the server, for ever; and so is one
  slower on average than `AVATARS_BODY_MIN_BYTES_PER_SECOND` after that grace;
- a read-only path (`/metrics`) answers anything but GET or HEAD with a 405, unread;
- a request that fails before anything answers it because the database cannot be used
  (a token's or a session's lookup) is answered 503, a page of the studio or the API's
  JSON (`avatars/outage.py`); any other API request that fails so, the API's JSON 500.

The token's and the session's lookups here run before Django's request starts, so each is
given what a request gives a view: its thread's connection to the database is closed if
it broke (a server restart) or is past its age, before and after the lookup.
"""

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from importlib import import_module
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.db import connections
from django.http import HttpResponse, parse_cookie

from avatars import door_pages, outage, upload_bodies
from studio import dbfaults, originals, uploads
from studio.api.auth import token_for_header
from studio.api.door import method_not_allowed, methods_taken, not_found
from studio.api.http import INTERNAL_ERROR, READ_ONLY, UNAUTHORIZED, error_response

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)


def _as_a_request(function: Callable[[str], Any]) -> Callable[[str], Awaitable[Any]]:
    """Run a lookup on Django's thread with the connection handling a request gets."""

    def run(header: str) -> Any:
        _close_old_connections()
        try:
            return function(header)
        finally:
            _close_old_connections()

    return sync_to_async(run)


def _close_old_connections() -> None:
    """Close this thread's broken or aged connections, as Django does at a request's edges.

    Never one inside a transaction: none is open here when serving, but a test's wraps the
    whole request, on this same thread.
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


API_PREFIX = "/api/"
GET_ONLY = frozenset({"/metrics"})  # paths that never take a body: nothing to read
READS = ("GET", "HEAD")  # what a read-only token may send a body with, as any other
UPLOAD = re.compile(r"/api/v1/subjects/[^/]+/references/?")  # a reference photo's upload
SIGN_IN_FIRST = "Sign in first: a request from someone not signed in may carry at most {kb:g} KB."
TOO_SLOW = "The request body did not arrive in time."
# RFC 9112 §6.3: a request framed both ways may be read one way here and another by a proxy
# in front (request smuggling); it is refused, and its connection closed.
TWO_FRAMINGS = (
    "A request may state its length (Content-Length) or be sent in chunks "
    "(Transfer-Encoding), not both."
)
LENGTH_REQUIRED = (
    "An upload must state its size: send it with a Content-Length header, not in chunks."
)


class Rule(NamedTuple):
    """What a request's body may be: its most bytes, the refusal past them, its deadline."""

    limit: int
    too_large: str
    deadline: float | None  # seconds the whole body may take to arrive, if bounded
    page: bool = False  # a signed-in person's studio page: refuse with a page, not text


class BodyLimit:
    """Wrap an ASGI application so that no request body is read beyond what it may be."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = origin_form(scope)
        if scope["type"] != "http":
            await self._guard(scope, receive, send)
            return
        started = False

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._guard(scope, receive, watching_send)
        except Exception as exc:
            # Django answers what fails in a view; this is what fails around it (a token's
            # or a session's lookup here, spooling the body there): the server's bare text.
            if started:
                raise
            await _answer_failure(send, scope, exc)

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if await _refused_whoever_sent_it(scope, headers, send):
            return
        content_type = headers.get("content-type", "")
        form_data = uploads.is_upload(content_type)
        limit = uploads.body_limit(content_type)
        length = headers.get("content-length")
        declared_past = length is not None and (not length.isdigit() or int(length) > limit)
        has_body = declared_past or int(length or 0) > 0
        has_body = has_body or "chunked" in headers.get("transfer-encoding", "")
        api = scope["path"].startswith(API_PREFIX)
        if has_body and api and await _refused_by_token(scope, headers, send):
            return
        if length is None and has_body and form_data:
            await _answer(send, scope, 411, "length_required", LENGTH_REQUIRED)
            return
        too_large = uploads.body_too_large(content_type)
        # A stranger's body is held to the stranger's limit, however long it says it is (a
        # review's 500 MB was told of the signed-in limit, not that its sender was out).
        known = api or not has_body or await _as_a_request(signed_in)(headers.get("cookie", ""))
        if declared_past and known:
            await _refuse_too_large(send, scope, too_large, page=form_data and not api)
            return
        deadline: float | None = None
        if not known:
            limit = min(limit, settings.AVATARS_ANONYMOUS_BODY_BYTES)
            too_large = SIGN_IN_FIRST.format(kb=limit / 1024)
            deadline = settings.AVATARS_ANONYMOUS_BODY_SECONDS
            if length is not None and (declared_past or int(length) > limit):
                if form_data:  # a photo sent after its person's sign-in ended: say so
                    signed_out = partial(door_pages.signed_out_page, headers)
                    await _send_page(send, 413, signed_out, too_large)
                else:
                    await _answer(send, scope, 413, "too_large", too_large)
                return
        # A signed-in person's upload past the limit is answered with a page of the studio.
        page = form_data and deadline is None and not api
        # Only a POST's upload takes a place: not a stranger's, nor a body sent with a GET.
        counted = form_data and has_body and deadline is None and scope["method"] == "POST"
        if deadline is None and has_body:
            deadline = _slowest(int(length) if length is not None else limit)
        rule = Rule(limit, too_large, deadline, page)
        if counted:
            await self._run_upload(scope, receive, send, rule, headers, api=api)
        else:
            await self._run_counting(scope, receive, send, rule)

    async def _run_upload(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        rule: Rule,
        headers: dict[str, str],
        *,
        api: bool,
    ) -> None:
        """Read and serve an upload once it is let in (avatars/upload_bodies.py), else 503."""
        if api:
            person = await _as_a_request(token_user)(headers.get("authorization", ""))
        else:
            person = await _as_a_request(session_user)(headers.get("cookie", ""))
        async with upload_bodies.admitted(str(person)) as admitted:
            if admitted:
                await self._run_counting(scope, receive, send, rule)
            else:
                await _busy(send, scope, headers, page=rule.page)

    async def _run_counting(self, scope: Scope, receive: Receive, send: Send, rule: Rule) -> None:
        limit, too_large, deadline, page = rule
        received = 0
        cut_off: str | None = None  # why the body was cut off: "large" or "slow"
        complete = False
        started = False
        loop = asyncio.get_running_loop()
        ends = None if deadline is None else loop.time() + deadline

        async def counting_receive() -> Message:
            nonlocal received, cut_off, complete
            if cut_off:
                return {"type": "http.disconnect"}
            if complete:
                return await receive()  # after the body: waiting to hear of a disconnect
            wait = float(settings.AVATARS_BODY_IDLE_SECONDS)
            if ends is not None:
                wait = min(wait, max(0.0, ends - loop.time()))
            try:
                async with asyncio.timeout(wait):
                    message = await receive()
            except TimeoutError:
                # Django stops reading at a disconnect and answers nothing; we do.
                cut_off = "slow"
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if received > limit:
                    cut_off = "large"
                    return {"type": "http.disconnect"}
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counting_receive, watching_send)
        if cut_off == "large" and not started:
            await _refuse_too_large(send, scope, too_large, page=page)
        elif cut_off == "slow" and not started:
            await _answer(send, scope, 408, "too_slow", TOO_SLOW)


ABSOLUTE_FORM = re.compile(r"(?i)https?://([^/?#]*)(.*)")


def origin_form(scope: Scope) -> Scope:
    """Return `scope` with an absolute-form target ("GET http://host/api/v1/x") as a path.

    HTTP/1.1 servers must take that form (RFC 9112 §3.2.2), and its host instead of the
    Host header. uvicorn hands it on as the path: the API's requests so sent got the
    studio's HTML "Not found", past the body limits kept for /api/ (a review).
    """
    if scope["type"] != "http":
        return scope
    found = ABSOLUTE_FORM.fullmatch(scope["path"])
    if found is None:
        return scope
    authority, path = found.group(1), found.group(2) or "/"
    raw = scope.get("raw_path") or b""
    raw_found = re.fullmatch(rb"(?i)https?://[^/?#]*(.*)", raw)
    headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
    headers.append((b"host", authority.encode("latin-1")))
    return {
        **scope,
        "path": path,
        "raw_path": (raw_found.group(1) or b"/") if raw_found else path.encode("latin-1"),
        "headers": headers,
    }


def _slowest(size: int) -> float:
    """Return the seconds a body of `size` bytes may take in all, from anyone at all.

    The idle limit alone let a token's holder (or a signed-in page) keep a connection for
    as long as it sent a byte a minute (a review's finding); so every body must also
    arrive at `AVATARS_BODY_MIN_BYTES_PER_SECOND` on average, after the idle limit's grace.
    """
    return settings.AVATARS_BODY_IDLE_SECONDS + size / settings.AVATARS_BODY_MIN_BYTES_PER_SECOND


def signed_in(cookie_header: str) -> bool:
    """Say whether the request's session cookie names a session of a signed-in user.

    Only whether one is signed in: Django's own middleware checks the session in full
    (its user, its password hash) before any view sees the request.
    """
    return session_user(cookie_header) is not None


def session_user(cookie_header: str) -> str | None:
    """Return the user the request's session says is signed in (their key), or None."""
    key = parse_cookie(cookie_header).get(settings.SESSION_COOKIE_NAME)
    if not key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = store.get(SESSION_KEY)
    return None if user is None else str(user)


def token_user(authorization_header: str) -> str | None:
    """Return the user the request's API token stands for (their key), or None."""
    token = token_for_header(authorization_header)
    return None if token is None else str(token.user_id)


async def _answer_failure(send: Send, scope: Scope, exc: Exception) -> None:
    """Answer a request the door failed on: 503 for a database out of reach, else a 500."""
    api = scope["path"].startswith(API_PREFIX)
    if dbfaults.unusable(exc):
        logger.error(
            "A request failed before it was answered: %s: %s", scope["path"], dbfaults.said(exc)
        )
        retry = [(b"retry-after", str(outage.RETRY_AFTER).encode())]
        if api:
            await _send_json(send, 503, outage.CODE, outage.MESSAGE, extra=retry)
        else:
            await _send_page(send, 503, _outage_page(scope), outage.MESSAGE, extra=retry)
        return
    if not api:
        raise exc
    logger.exception("An API request failed before it was answered: %s", scope["path"])
    await _send_json(send, 500, "internal_error", INTERNAL_ERROR)


def _headers(scope: Scope) -> dict[str, str]:
    """Return the request's headers by their lower-case names."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _outage_page(scope: Scope) -> Callable[[], str]:
    """Draw the studio's outage page for this request: a form sent is said not saved."""
    headers = _headers(scope)
    sent = scope["method"] not in ("GET", "HEAD")
    where = {"sent": sent, "here": scope["path"], "back": door_pages.came_from(headers) or ""}
    return partial(outage.page_html, **where)


async def _refuse_too_large(send: Send, scope: Scope, message: str, *, page: bool) -> None:
    """Answer 413: JSON to the API, a page of the studio to a signed-in person, else text.

    A reference photo's upload through the API is answered as the store would answer a
    file past its cap (400 `too_large`, docs/api.md): a body past the limit holds one.
    """
    if UPLOAD.fullmatch(scope["path"]):
        await _send_json(send, 400, "too_large", originals.too_large())
        return
    if not page:
        await _answer(send, scope, 413, "too_large", message)
        return
    headers = _headers(scope)
    await _send_page(send, 413, lambda: door_pages.too_large_page(headers), message)


async def _send_page(
    send: Send,
    status: int,
    render: Callable[[], str],
    fallback: str,
    *,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Answer with a page of the studio drawn by `render`, or `fallback`'s sentence as text."""
    try:
        body = render()
    except Exception:  # a page that cannot be drawn (static files not collected): the sentence
        logger.exception("The door's page could not be rendered.")
        await _send(send, status, fallback.encode(), b"text/plain; charset=utf-8", extra)
        return
    await _send(send, status, body.encode(), b"text/html; charset=utf-8", extra)


async def _refused_whoever_sent_it(scope: Scope, headers: dict[str, str], send: Send) -> bool:
    """Answer, unread, a write to a read-only path and a request framed both ways; say so."""
    if scope["path"] in GET_ONLY and scope["method"] not in READS:
        await _send(send, 405, b"Method not allowed.", b"text/plain", [(b"allow", b"GET, HEAD")])
        return True
    if "content-length" in headers and "transfer-encoding" in headers:
        await _answer(send, scope, 400, "invalid_request", TWO_FRAMINGS)
        return True
    return False


async def _busy(send: Send, scope: Scope, headers: Mapping[str, str], *, page: bool) -> None:
    """Answer an upload not let in to be read (avatars/upload_bodies.py): 503, unread."""
    retry = [(b"retry-after", str(upload_bodies.RETRY_AFTER).encode())]
    if page:
        render = partial(door_pages.busy_page, headers)
        await _send_page(send, 503, render, upload_bodies.BUSY, extra=retry)
    elif scope["path"].startswith(API_PREFIX):
        await _send_json(send, 503, "busy", upload_bodies.BUSY, extra=retry)
    else:
        await _send(send, 503, upload_bodies.BUSY.encode(), b"text/plain; charset=utf-8", retry)


async def _refused_by_token(scope: Scope, headers: dict[str, str], send: Send) -> bool:
    """Answer an API request with a body as its token and route would, unread; say if it was.

    A missing or wrong token gets its 401 first, whatever the body (docs/api.md).
    """
    token = await _as_a_request(token_for_header)(headers.get("authorization", ""))
    if token is None:
        await _unauthorized(send)
        return True
    refusal = _refused_unread(scope["path"], scope["method"], may_write=token.may_write)
    if refusal is None:
        return False
    allow = [(b"allow", refusal["Allow"].encode())] if refusal.has_header("Allow") else []
    await _send(send, refusal.status_code, refusal.content, b"application/json", allow)
    return True


def _refused_unread(path: str, method: str, *, may_write: bool) -> HttpResponse | None:
    """Return what the route answers a token's request with a body before reading it, if anything.

    The route comes first, then its methods (docs/api.md: "A method a route does not take
    still answers 405 first, whether or not the request carries a body (which is not
    read)."), then the token's scope: a read-only token's write is 403.
    """
    taken = methods_taken(path)
    if not taken:
        return not_found()
    if method not in taken:
        return method_not_allowed(sorted(taken))
    if method not in READS and not may_write:
        return error_response(403, "read_only", READ_ONLY)
    return None


async def _unauthorized(send: Send) -> None:
    await _send_json(
        send,
        401,
        "unauthorized",
        UNAUTHORIZED,
        extra=[(b"www-authenticate", b'Bearer realm="api"')],
    )


async def _answer(send: Send, scope: Scope, status: int, code: str, message: str) -> None:
    if scope["path"].startswith(API_PREFIX):
        await _send_json(send, status, code, message)
    else:
        await _send(send, status, message.encode(), b"text/plain; charset=utf-8")


async def _send_json(
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await _send(send, status, body, b"application/json", extra)


async def _send(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        # The body was not read: the connection cannot carry another request.
        (b"connection", b"close"),
        # A refusal is about this request: no cache keeps it (as every API answer).
        (b"cache-control", b"max-age=0, no-cache, no-store, must-revalidate, private"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
