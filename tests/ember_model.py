"""An in-process Ember with its own ledger, for the stateful property test.

It answers the routes Avatars relies on through an `httpx.MockTransport`. How it
behaves is decided request by request: the test queues behaviours per route and
the model pops one for each request it gets (normal when none is queued). The
ledger records what Ember would know for certain: paid jobs per task and per
idempotency key, which images lost their protection, which history id belongs
to which image, which jobs were polled.
"""

import hashlib
import itertools
import json
import re
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from studio.models import POLL_BOUND
from tests.factories import png_bytes

JOBS = "/api/v1/api-generators/jobs"
POLL_STEP = 3.0  # seconds the worker waits between two polls of a job
CLIP_BOUND = 1800.0  # seconds after its job was made that a clip may still be re-sent
NOT_AN_IMAGE = b"<html><body>Ember is having a bad day</body></html>"

# What each route may do, besides its first, normal behaviour.
SUBMIT = (
    "accept",
    "lose_answer",  # job made and charged, then the connection drops
    "applied_then_502",  # job made and charged, then a proxy answers 502
    "refuse_500",  # nothing made, 500
    "reject_422",  # nothing made, refused for good (a clip's key re-sent, a body Ember won't take)
    "busy_0",  # 429 with Retry-After: 0
    "busy_huge",  # 429 with Retry-After: 1e400
    "busy_garbage",  # 429 with Retry-After: soon
    "bad_body",  # job made and charged, then a 202 whose body cannot be decoded
    "die_before",  # the worker dies before the request reaches Ember
    "die_after",  # the worker dies just after Ember made (and charged) the job
)
JOB = (
    "succeed",
    "slow",  # still running for a few polls
    "late",  # succeeds a minute past the poll bound: its task has gone uncertain by then
    "fail",
    "no_history",  # succeeded, but Ember could not write its history row
    "same_bytes",  # the same bytes as the previous job's image
    "reference_bytes",  # the bytes of a reference photo
    "not_image",  # bytes that are not an image (and hash to the sha256 Ember names)
)
READY_AFTER = {"slow": 3 * POLL_STEP, "late": POLL_BOUND + 60}  # seconds after it was made
POLL = ("normal", "502", "die")
FILE = ("normal", "404", "not_image", "die")
RELEASE = ("normal", "503", "applied_dropped", "die_before", "die_after")
HISTORY = ("normal", "503")


class Death(BaseException):
    """The worker process dies here. Not an Exception: nothing in the worker may catch it."""


@dataclass
class Clock:
    """The one clock Avatars and Ember share during a run; it moves only when told."""

    at: datetime

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@dataclass
class Image:
    id: str
    data: bytes
    task_id: str
    released: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Job:
    id: str
    task_id: str
    key: str
    body: dict[str, Any]
    image: Image
    created_at: datetime
    ready_at: datetime
    fails: bool = False
    history_id: str | None = None
    history_error: str | None = None
    stale_nested: bool = False  # a repaired row whose nested result still says `history: null`

    def finished(self, now: datetime) -> bool:
        return now >= self.ready_at

    def result(self) -> dict[str, Any]:
        nested = self.history_id if not self.stale_nested else None
        return {
            "image": {
                "id": self.image.id,
                "mime": "image/png",
                "sha256": self.image.sha256,
                "bytes": len(self.image.data),
                "metadata": {
                    "provider": self.body.get("provider"),
                    "model": self.body.get("model"),
                    "width": 64,
                    "height": 48,
                },
            },
            "history": {"id": nested} if nested else None,
            "history_error": None if self.history_id else self.history_error,
        }


@dataclass
class EmberModel:
    clock: Clock
    references: list[bytes]
    queues: dict[str, deque[str]] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    images: dict[str, Image] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    charges: Counter[str] = field(default_factory=Counter)  # paid jobs per task id
    key_charges: Counter[str] = field(default_factory=Counter)  # paid jobs per clip key
    polled: Counter[str] = field(default_factory=Counter)  # polls received per job id
    history_owner: dict[str, str] = field(default_factory=dict)  # history id -> image id
    busy_since: dict[str, datetime] = field(default_factory=dict)  # task id -> 429 answered at
    broken_promises: list[tuple[int, str]] = field(default_factory=list)  # (hole, words)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # --- what the test controls ------------------------------------------------

    def will(self, route: str, behaviour: str) -> None:
        """Queue `behaviour` for the next request on `route` (or the next job made)."""
        self.queues.setdefault(route, deque()).append(behaviour)

    def calm(self) -> None:
        """Forget every queued behaviour: from now on Ember answers normally."""
        self.queues.clear()

    def repair_history(self, *, stale_nested: bool) -> None:
        """Write the history rows Ember failed to write, as Ember's own repair would."""
        for job in self.jobs.values():
            if job.history_id is None and not job.fails and job.finished(self.clock.now()):
                job.history_id = f"hist_{job.id}_repaired"
                job.stale_nested = stale_nested
                self.history_owner[job.history_id] = job.image.id

    def paid_jobs(self, task_id: str) -> list[Job]:
        return [job for job in self.jobs.values() if job.task_id == task_id]

    # --- the transport ------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if method == "POST" and path == JOBS:
            return self._submit(request)
        if method == "GET" and (m := re.fullmatch(rf"{JOBS}/([^/]+)", path)):
            return self._poll(m[1])
        if method == "GET" and (m := re.fullmatch(r"/api/v1/images/([^/]+)/file", path)):
            return self._file(m[1])
        if method == "PATCH" and (
            m := re.fullmatch(r"/api/v1/explorations/([^/]+)/protection", path)
        ):
            return self._release(m[1])
        if method == "GET" and path == "/api/v1/history":
            return self._history(request.url.params.get("task_id", ""))
        return _error(404, "not_found", f"No route {method} {path}.")

    def _next(self, route: str, default: str = "normal") -> str:
        queue = self.queues.get(route)
        return queue.popleft() if queue else default

    def _submit(self, request: httpx.Request) -> httpx.Response:
        behaviour = self._next("submit", "accept")
        body = json.loads(request.content)
        task_id = body["source_metadata"]["task_id"]
        key = request.headers.get("Idempotency-Key", "")
        self._check_pacing(task_id)
        if behaviour == "die_before":
            raise Death("died before the submit left")
        if behaviour == "refuse_500":
            return _error(500, "internal", "Ember had a problem.")
        if behaviour == "reject_422":
            return _error(422, "unprocessable", "Ember will not take this request.")
        if behaviour.startswith("busy_"):
            self.busy_since[task_id] = self.clock.now()
            retry_after = {"busy_0": "0", "busy_huge": "1e400", "busy_garbage": "soon"}[behaviour]
            return _error(429, "busy", "Ember is busy.", {"Retry-After": retry_after})
        job, replayed = self._accept(task_id, key, body)
        if behaviour == "die_after":
            raise Death("died after Ember made the job")
        if behaviour == "lose_answer":
            raise httpx.ReadError("The connection dropped before Ember's answer arrived.")
        if behaviour == "applied_then_502":
            return _error(502, "bad_gateway", "The proxy lost Ember's answer.")
        if behaviour == "bad_body":
            # httpx cannot decode this body: the answer is lost after Ember made the job.
            return httpx.Response(
                202, content=b"\x1f\x8bnot gzip", headers={"Content-Encoding": "gzip"}
            )
        answer = {"id": job.id, "status": "queued", "created_at": job.created_at.isoformat()}
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return httpx.Response(202, json=answer, headers=headers)

    def _check_pacing(self, task_id: str) -> None:
        """Record a broken promise when a task is re-sent less than a second after a 429."""
        busy = self.busy_since.pop(task_id, None)
        if busy is not None and (self.clock.now() - busy).total_seconds() < 1:
            waited = (self.clock.now() - busy).total_seconds()
            self.broken_promises.append(
                (6, f"task {task_id} was sent again {waited:.0f} s after Ember answered 429")
            )

    def _accept(self, task_id: str, key: str, body: dict[str, Any]) -> tuple[Job, bool]:
        now = self.clock.now()
        if key and key in self.keys:
            job = self.jobs[self.keys[key]]
            waited = (now - job.created_at).total_seconds()
            if waited > CLIP_BOUND:
                self.broken_promises.append(
                    (10, f"clip key {key} was re-sent {waited:.0f} s after {job.id} was made")
                )
            return job, True
        n = next(self._ids)
        job = self._make_job(n, task_id, key, body, self._next("job", "succeed"))
        self.jobs[job.id] = job
        self.images[job.image.id] = job.image
        if job.history_id:
            self.history_owner[job.history_id] = job.image.id
        self.charges[task_id] += 1
        if key:
            self.keys[key] = job.id
            self.key_charges[key] += 1
        return job, False

    def _make_job(self, n: int, task_id: str, key: str, body: dict[str, Any], how: str) -> Job:
        now = self.clock.now()
        data = png_bytes(n)
        if how == "same_bytes" and self.images:
            data = list(self.images.values())[-1].data
        elif how == "reference_bytes":
            data = self.references[0]
        elif how == "not_image":
            data = NOT_AN_IMAGE
        job = Job(
            id=f"job_{n}",
            task_id=task_id,
            key=key,
            body=body,
            image=Image(id=f"img_{n}", data=data, task_id=task_id),
            created_at=now,
            ready_at=now + timedelta(seconds=READY_AFTER.get(how, 0)),
            fails=how == "fail",
        )
        if how == "no_history":
            job.history_error = "Ember could not write its history row."
        elif not job.fails:
            job.history_id = f"hist_{n}"
        return job

    def _poll(self, job_id: str) -> httpx.Response:
        behaviour = self._next("poll")
        self.polled[job_id] += 1
        self.clock.advance(POLL_STEP)
        if behaviour == "die":
            raise Death("died while polling")
        if behaviour == "502":
            return _error(502, "bad_gateway", "The proxy could not reach Ember.")
        job = self.jobs.get(job_id)
        if job is None:
            return _error(404, "not_found", f"No job {job_id}.")
        if not job.finished(self.clock.now()):
            return httpx.Response(200, json={"id": job_id, "status": "running"})
        if job.fails:
            error = {"code": "content_policy", "message": "The provider refused this prompt."}
            return httpx.Response(200, json={"id": job_id, "status": "failed", "error": error})
        return httpx.Response(
            200, json={"id": job_id, "status": "succeeded", "result": job.result()}
        )

    def _file(self, image_id: str) -> httpx.Response:
        behaviour = self._next("file")
        if behaviour == "die":
            raise Death("died while fetching")
        image = self.images.get(image_id)
        if image is None or behaviour == "404":
            return _error(404, "not_found", f"No image {image_id}.")
        data = NOT_AN_IMAGE if behaviour == "not_image" else image.data
        return httpx.Response(200, content=data, headers={"Content-Type": "image/png"})

    def _release(self, image_id: str) -> httpx.Response:
        behaviour = self._next("release")
        image = self.images.get(image_id)
        if behaviour == "die_before":
            raise Death("died before the release left")
        if behaviour == "503":
            return _error(503, "unavailable", "Ember cannot take acknowledgements right now.")
        if image is None:
            return _error(404, "not_found", f"No image {image_id}.")
        image.released = True
        if behaviour == "applied_dropped":
            raise httpx.ReadError("The connection dropped after Ember released the image.")
        if behaviour == "die_after":
            raise Death("died after Ember released the image")
        return httpx.Response(200, json={"protected": False})

    def _history(self, task_id: str) -> httpx.Response:
        if self._next("history") == "503":
            return _error(503, "unavailable", "Ember's history is resting.")
        now = self.clock.now()
        items = [
            {
                "id": job.history_id,
                "job_id": job.id,
                "image_id": job.image.id,
                "created_at": job.created_at.isoformat(),
                "source_metadata": job.body["source_metadata"],
                "result": job.result(),
            }
            for job in self.jobs.values()
            if job.task_id == task_id and job.history_id and job.finished(now) and not job.fails
        ]
        return httpx.Response(200, json={"items": items})


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {"error": {"code": code, "message": message}}
    return httpx.Response(status, json=body, headers=headers)
