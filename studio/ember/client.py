"""The Ember client: the only module that speaks HTTP to Ember (docs/ember.md).

Every failure is a typed `EmberError` that says whether the request may have
reached Ember (`may_have_arrived`), because that decides whether a paid submit
may be sent again. Answers that make no sense are errors too, never crashes.
"""

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from django.conf import settings

from studio import metrics, originals
from studio.ember.answers import (
    MAX_ANSWER_BYTES,
    UNFRAMED,
    Reply,
    counted,
    framed,
    json_object,
    kept_result,
    read_answer,
    retry_after,
)
from studio.ember.errors import (
    EmberAuthError,
    EmberBadAnswer,
    EmberBusy,
    EmberError,
    EmberNotFound,
    EmberRejected,
    EmberTooLarge,
    EmberUnavailable,
    EmberUnknownOutcome,
    EmberUnsafeId,
)
from studio.ember.transport import Transport

SUBMIT_PATH = "/api/v1/api-generators/jobs"
HISTORY_PATH = "/api/v1/history"
# Stands in a submit body for a photo's base64 until the bytes are spliced in.
PHOTO_MARK = "\u2063avatars-photo\u2063"
SOURCE_APP = "cwkAvatars"  # how Ember's history names this app's rows
JOB_STATUSES = ("queued", "running", "succeeded", "failed")

# seconds; a read bound, not a verdict on the job: a slow answer to a submit is
# "unknown", never "refused".
TIMEOUT = httpx.Timeout(connect=5.0, read=30.0, write=30.0, pool=5.0)
FETCH_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)
# seconds a whole exchange may take: a byte every few seconds passes every read timeout.
DEADLINE = 60.0
DEADLINES = {"submit": 300.0, "fetch": 300.0}  # a submit carries photos; a fetch, an image
MAX_MESSAGE = 1000  # characters of an Ember error message a task keeps (and pages show)
KEPT = 8  # idle connections kept alive at least, more with more slots
# Ember's ids go into URL paths (/jobs/{id}, /images/{id}/file): one of another shape
# ("../history", "img/../../x", "img?x=1") would point a request at another route.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,119}")  # the 120 its columns hold
SHOWN_ID_CHARS = 80  # an id refused is shown escaped and cut to about this many characters


@dataclass(frozen=True)
class Job:
    id: str
    status: str
    result: dict[str, Any] | None
    error: str


@dataclass(frozen=True)
class Submitted:
    job_id: str
    replayed: bool


class EmberClient:
    """An async client for one Ember base URL and token."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        slots: int = 0,
    ) -> None:
        """Open the client; `transport` replaces the network (tests pass a mock's).

        `slots` is how many requests the caller keeps in flight at once: as many idle
        connections are kept alive for the next ones (studio/ember/transport.py).
        """
        self.base_url = (base_url or settings.EMBER_URL).rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {token or settings.EMBER_TOKEN}",
            # Answers are read to a bound on what they decode to (answers.py); asking for
            # them as they are spares inflating anything at all.
            "Accept-Encoding": "identity",
        }
        tls = httpx.create_ssl_context() if self.base_url.startswith("https:") else None
        self._transport = transport or Transport(keep=max(KEPT, slots), ssl_context=tls)
        # Paid submits never ride a kept-alive connection: the server may close an idle
        # one just as we send, and that failure cannot tell "never read" from "lost
        # answer", which would leave an image `uncertain` for nothing. A fresh
        # connection that fails before sending is plainly "not sent".
        self._submit_transport = transport or Transport(keep=0, ssl_context=tls)

    async def aclose(self) -> None:
        await self._transport.aclose()
        await self._submit_transport.aclose()

    async def submit(
        self,
        payload: Mapping[str, Any] | bytes,
        *,
        idempotency_key: str = "",
        provider: str = "",
    ) -> Submitted:
        """POST a job to the asynchronous door and return Ember's job id; count it as paid.

        `payload` may come already encoded (`encode_payload`), so that the caller can let go
        of the photos' base64 before the body is sent (one copy fewer per slot in flight);
        `provider` then names the job for the count.
        """
        if not isinstance(payload, bytes):
            provider = provider or str(payload.get("provider") or "")
            payload = encode_payload(payload)
        try:
            submitted = await self._submit(payload, idempotency_key)
        except BaseException as exc:  # a cancelled submit, too, may have reached Ember
            metrics.count_paid(provider, exc.outcome if isinstance(exc, EmberError) else "unknown")
            raise
        metrics.count_paid(provider, "replayed" if submitted.replayed else "accepted")
        return submitted

    async def _submit(self, content: bytes, idempotency_key: str) -> Submitted:
        headers = {"Content-Type": "application/json"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        response = await self._send(
            "POST",
            SUBMIT_PATH,
            route="submit",
            content=content,
            headers=headers,
            via=self._submit_transport,
        )
        if response.status_code != 202:
            raise _refusal(response, unknown_outcome=True)
        body = json_object(response)
        job_id = body.get("id")
        if not isinstance(job_id, str):
            raise EmberBadAnswer("Ember accepted the job but its answer has no job id.")
        safe_id(job_id, "job")  # accepted, maybe paid, and yet nothing can ask about it
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return Submitted(job_id=job_id, replayed=replayed)

    async def poll(self, job_id: str) -> Job:
        """Return the job's status. 404 → EmberNotFound; anything else odd → another EmberError."""
        response = await self._send("GET", f"{SUBMIT_PATH}/{safe_id(job_id, 'job')}", route="poll")
        if response.status_code != 200:
            raise _refusal(response, unknown_outcome=False)
        body = json_object(response)
        if body.get("id", job_id) != job_id:
            # An answer about another job (a confused proxy, a stray answer) is not this
            # one's, and the connections that brought it may be out of step: drop them.
            if isinstance(self._transport, Transport):  # a test's mock keeps none
                self._transport.drop_idle()
            raise EmberBadAnswer(
                f"Ember answered about job {shown_id(body.get('id'))} when asked about {job_id}."
            )
        status = body.get("status")
        if status not in JOB_STATUSES:
            raise EmberBadAnswer(f"Ember answered an unknown job status: {status!r}.")
        result = body.get("result")
        if status == "succeeded":
            check_result(result)
        error = ""
        if status == "failed":
            error = _error_message(body.get("error")) or "Ember reported the job failed."
        return Job(
            id=job_id,
            status=status,
            result=kept_result(result)
            if isinstance(result, dict) and status == "succeeded"
            else None,
            error=error,
        )

    async def fetch(
        self, image_id: str, *, sha256: str | None = None, size: object = None
    ) -> tuple[bytes, str]:
        """Return an image's original bytes and content type, checked against `sha256`.

        Without a sha256 they are checked against `size` (the answer's `bytes`), and with
        neither the answer must say its own length (`Content-Length`, or chunks): a body
        that ends with its connection cannot be told from one cut short, and a review's
        Ember had a clip archived with its first frame only and its whole original released.
        Reading stops as soon as more than `AVATARS_MAX_IMAGE_BYTES` arrived (at once
        when `Content-Length` says so): the originals store would refuse the file anyway.
        """
        response = await self._send(
            "GET",
            f"/api/v1/images/{safe_id(image_id, 'image')}/file",
            route="fetch",
            bounds=FETCH_TIMEOUT,
            limit=settings.AVATARS_MAX_IMAGE_BYTES,
        )
        if response.status_code != 200:
            raise _refusal(response, unknown_outcome=False)
        data = response.content
        if data is None:
            raise EmberTooLarge(originals.too_large())
        # Hex names the same digest in either case. A claim that is present must match,
        # even an empty one: taken as "not given", it let bytes damaged on the way be
        # archived and Ember's whole copy released (a review with its own Ember).
        if sha256 is not None:
            if hashlib.sha256(data).hexdigest() != sha256.lower():
                raise EmberBadAnswer("The image Ember sent does not match its sha256.")
        elif counted(size):
            if len(data) != size:
                raise EmberBadAnswer(
                    f"The image Ember sent is {len(data):,} bytes; its answer said {size:,}."
                )
        elif not framed(response.headers):
            raise EmberBadAnswer(UNFRAMED)
        return data, response.headers.get("Content-Type", "")

    async def release(self, image_id: str) -> bool:
        """Tell Ember our copy is durable. True only on 200; never raises.

        False means *unconfirmed*, not "still protected": a PATCH that Ember
        applied before the connection dropped looks exactly like a failure.
        """
        return await self.release_status(image_id) == 200

    async def release_status(self, image_id: str) -> int | None:
        """Send the release (as `release`); return Ember's status, None when none came."""
        if not is_safe_id(image_id):
            return None  # nothing is sent: the PATCH would land on another route
        try:
            response = await self._send(
                "PATCH",
                f"/api/v1/explorations/{image_id}/protection",
                route="release",
                json={"protected": False, "durable_copy": True},
            )
        except Exception:
            return None
        return response.status_code

    async def let_go(self, image_id: str) -> bool:
        """Release the image; True when nothing of it is left protected at Ember.

        That is Ember's 200, or its 404 to the release confirmed by a 404 from the file
        route. An image already let go of (a worker stopped after Ember applied the PATCH,
        before its answer was read) may be removed by the next ask, which Ember can then
        only answer 404: a review's 54 tasks stayed "release unconfirmed" for good, and
        "Ask Ember again" could never clear them. Never raises.
        """
        status = await self.release_status(image_id)
        return status == 200 or (status == 404 and await self.image_gone(image_id))

    async def image_gone(self, image_id: str) -> bool:
        """Say whether Ember's file route answers 404 for the image: it no longer has it.

        Never raises; reads none of a 200's body. False whenever Ember did not say so.
        """
        if not is_safe_id(image_id):
            return False
        try:
            url = f"/api/v1/images/{image_id}/file"
            response = await self._send("GET", url, route="fetch", bounds=FETCH_TIMEOUT, limit=0)
        except Exception:
            return False
        return response.status_code == 404

    async def history(self, task_id: str) -> list[dict[str, Any]]:
        """Return Ember's history rows for one of our tasks (possibly none)."""
        response = await self._send(
            "GET", HISTORY_PATH, route="history", params=history_query(task_id)
        )
        if response.status_code != 200:
            raise _refusal(response, unknown_outcome=False)
        items = json_object(response).get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise EmberBadAnswer("Ember's history answer has no list of items.")
        return items

    async def _send(self, method: str, url: str, *, route: str, **kwargs: Any) -> Reply:
        """Send a request (see `_exchange`), timed under `route` and the answer's status.

        The status is the HTTP code, or the outcome of the EmberError raised instead
        (`unreachable`, `unknown` when the connection failed after sending), or `error`.
        """
        started = time.perf_counter()
        status = "error"
        try:
            deadline = DEADLINES.get(route, DEADLINE)
            reply = await self._exchange(method, url, deadline=deadline, **kwargs)
            status = str(reply.status_code)
            return reply
        except BaseException as exc:
            status = exc.outcome if isinstance(exc, EmberError) else status
            raise
        finally:
            metrics.time_request(route, status, time.perf_counter() - started)

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        via: httpx.AsyncBaseTransport | None = None,
        limit: int = MAX_ANSWER_BYTES,
        deadline: float = DEADLINE,
        bounds: httpx.Timeout = TIMEOUT,
        headers: Mapping[str, str] | None = None,
        **body: Any,
    ) -> Reply:
        """Send a request and read its answer: at most `limit` bytes of a success's body.

        Any other answer's body is read to MAX_ANSWER_BYTES: it only carries a message.
        One that does not end within `deadline` seconds may have reached Ember. The
        request goes straight to the transport (`via`, else the kept-alive one): httpx's
        client would add cookies, redirects and a second parse of the URL, none of which
        Ember's API uses, for about half of what a request cost.
        """
        request = httpx.Request(
            method,
            self.base_url + url,
            headers={**self._headers, **(headers or {})},
            extensions={"timeout": bounds.as_dict()},
            **body,
        )
        try:
            async with asyncio.timeout(deadline):
                response = await (via or self._transport).handle_async_request(request)
                try:
                    response.request = request
                    content = await read_answer(response, limit)
                    return Reply(response.status_code, response.headers, content)
                finally:
                    await response.aclose()
        except TimeoutError as exc:
            raise EmberUnknownOutcome(
                f"Ember's answer did not arrive in full within {deadline:g} s."
            ) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # The request never left: nothing can have been accepted.
            raise EmberUnavailable(f"Ember could not be reached ({type(exc).__name__}).") from exc
        except httpx.TransportError as exc:
            # Sent (perhaps in part) and then lost: Ember may have acted on it.
            raise EmberUnknownOutcome(
                f"The connection to Ember failed after sending ({type(exc).__name__})."
            ) from exc


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """Return a submit body as the bytes sent (compact JSON, ASCII).

    A reference photo's base64 may come as bytes (the worker reads them so): it is spliced
    into the body as it is, so building the body makes one copy of the photos, not three
    (no text of them, no encoding of that text). Base64 needs no escaping inside a JSON
    string.
    """
    references = payload.get("references") or []
    photos = [ref["data"] for ref in references if isinstance(ref.get("data"), bytes)]
    if not photos:
        return json.dumps(payload, separators=(",", ":")).encode("ascii")
    marked = [
        {**ref, "data": PHOTO_MARK} if isinstance(ref.get("data"), bytes) else ref
        for ref in references
    ]
    text = json.dumps({**payload, "references": marked}, separators=(",", ":"))
    pieces = text.encode("ascii").split(json.dumps(PHOTO_MARK).encode("ascii"))
    if len(pieces) != len(photos) + 1:  # a prompt that holds the mark itself: as text, then
        return encode_payload({**payload, "references": _as_text(payload["references"])})
    body: list[bytes] = [pieces[0]]
    for photo, piece in zip(photos, pieces[1:], strict=True):
        body += [b'"', photo, b'"', piece]
    return b"".join(body)


def history_query(task_id: str) -> dict[str, str]:
    """Return the query that selects Ember's history rows of one of our tasks."""
    return {"source_app": SOURCE_APP, "task_id": task_id}


def history_url(task_id: str) -> str:
    """Return the URL a person asks for a task's history rows (what `history` sends)."""
    return f"{settings.EMBER_URL}{HISTORY_PATH}?{urlencode(history_query(task_id))}"


def job_url(job_id: str) -> str:
    """Return the URL a person asks for a job's status and answer (what `poll` sends)."""
    return f"{settings.EMBER_URL}{SUBMIT_PATH}/{quote(job_id, safe='')}"


def _as_text(references: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**ref, "data": ref["data"].decode("ascii")} if isinstance(ref.get("data"), bytes) else ref
        for ref in references
    ]


def check_result(result: object) -> None:
    """Raise EmberBadAnswer unless `result` has the shape of a succeeded job's result."""
    if not isinstance(result, dict):
        raise EmberBadAnswer("Ember said the job succeeded but sent no result.")
    image = result.get("image")
    if not isinstance(image, dict) or not isinstance(image.get("id"), str):
        raise EmberBadAnswer("Ember's result names no image id.")
    safe_id(image["id"], "image")
    sha = image.get("sha256")
    if sha is not None and not isinstance(sha, str):
        raise EmberBadAnswer("Ember's result has a sha256 that is not a string.")
    history = result.get("history")
    if history is not None and not (
        isinstance(history, dict) and isinstance(history.get("id"), str)
    ):
        raise EmberBadAnswer("Ember's result has a history entry without an id.")
    if history is not None:
        safe_id(history["id"], "history row")


def is_safe_id(value: object) -> bool:
    """Say whether `value` is an id Avatars may put in a URL path (SAFE_ID, no "..")."""
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None and ".." not in value


def safe_id(value: str, what: str) -> str:
    """Return `value` if it is a safe id, else raise EmberUnsafeId naming it (escaped)."""
    if not is_safe_id(value):
        raise EmberUnsafeId(
            f"Ember named the {what} {shown_id(value)}: an id Avatars will not put in a URL."
        )
    return value


def shown_id(value: object) -> str:
    """Return an id as people may read it: quoted, escaped to ASCII, cut to ~80 characters."""
    text = ascii(value)
    return text if len(text) <= SHOWN_ID_CHARS else f"{text[: SHOWN_ID_CHARS - 1]}\u2026"


def _error_message(error: object) -> str:
    """Return Ember's `error.message`, cut to MAX_MESSAGE characters ("" when there is none).

    A task keeps it and every page that shows the task shows it: a megabyte of it would
    be a megabyte in each row and each poll of the batch's page.
    """
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message: str = error["message"]
        return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
    return ""


def _ember_says(response: Reply) -> str:
    try:
        message = _error_message(response.json().get("error"))
    except (ValueError, AttributeError, RecursionError):
        message = ""
    return message or f"Ember answered HTTP {response.status_code}."


def _refusal(response: Reply, *, unknown_outcome: bool) -> EmberError:
    """Map a non-success status to the error that says what it proves (docs/ember.md)."""
    status = response.status_code
    message = _ember_says(response)
    if status in (429, 503):
        return EmberBusy(message, status=status, retry_after=retry_after(response))
    if status in (401, 403):
        return EmberAuthError(message, status=status)
    if status == 404:
        return EmberNotFound(message, status=status)
    if 400 <= status < 500:
        return EmberRejected(message, status=status)
    if unknown_outcome:
        # 500/502/504 (or any other surprise) to a submit: it may have been accepted.
        return EmberUnknownOutcome(message, status=status)
    return EmberError(message, status=status)
