"""Serve a local stand-in for Ember that honours docs/ember.md.

The simulator answers the public Ember routes (submit, poll, fetch, release, history and the
synchronous door) plus ``/_sim/...`` controls for demos and tests: latency, fault injection,
history repair, the retention cleanup, and listings of jobs, images, charges and requests.

State lives in memory: one :class:`SimulatorState` holds every job, image, history row,
charge and logged request, guarded by a single ``threading.Lock``. With ``state_file`` the jobs,
images, history and charges are written there on a clean stop and read back at start (the demo
uses this, so a restarted demo finds its jobs as the real Ember would); otherwise a restart
forgets everything. The HTTP layer is the standard library's ``ThreadingHTTPServer``
speaking HTTP/1.1. The module imports nothing from Django so it can run anywhere.

Usage::

    sim = Simulator(port=0, job_seconds=0).start()
    ...  # talk to sim.url over HTTP with "Authorization: Bearer dev-token"
    sim.stop()
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import io
import json
import math
import os
import re
import socket
import socketserver
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from PIL import Image, ImageDraw, ImageFont

JSON = dict[str, Any]
RGB = tuple[int, int, int]

IMAGE_SIZE = 512
CLIP_SIZE = 256
CLIP_FRAMES = 5
CLIP_FRAME_MS = 160
MAX_BODY_BYTES = 64 * 1024 * 1024
LATENCY_ROUTES = ("submit", "poll", "fetch", "release", "history", "generate")
NOT_AN_IMAGE = b"<html>not an image</html>"
HISTORY_FAILURE = "Ember could not write the history row (simulated)."
CONTENT_POLICY = {
    "code": "content_policy",
    "message": "The prompt was refused by the provider (simulated).",
}
SKIN_TONES: tuple[RGB, ...] = (
    (255, 224, 196),
    (241, 194, 160),
    (224, 172, 125),
    (198, 134, 86),
    (141, 85, 54),
    (94, 58, 38),
)
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


# --------------------------------------------------------------------------- HTTP values


class ApiError(Exception):
    """Carry an error answer (status, code, message) up to the dispatcher."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        """Render this error in the contract's error shape."""
        return error_response(self.status, self.code, self.message, self.headers)


@dataclass
class Request:
    """Hold one parsed HTTP request, independent of the socket it came from."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def header(self, name: str) -> str | None:
        """Return a header value by case-insensitive name."""
        return self.headers.get(name.lower())

    def param(self, name: str) -> str | None:
        """Return the first value of a query parameter."""
        values = parse_qs(self.query).get(name)
        return values[0] if values else None

    def json(self) -> JSON:
        """Decode the body as a JSON object or raise a 400."""
        try:
            payload = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
        if not isinstance(payload, dict):
            raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
        return payload

    def json_or_empty(self) -> JSON:
        """Decode an optional JSON object body; an empty body reads as {}."""
        return self.json() if self.body.strip() else {}


@dataclass
class Response:
    """Describe an answer; the handler turns it into bytes on the wire."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without sending any answer
    body_delay: float = 0.0  # seconds to wait between the headers and the body


def json_response(
    status: int, payload: JSON, headers: dict[str, str] | None = None, *, drop: bool = False
) -> Response:
    """Build a JSON answer."""
    body = json.dumps(payload).encode("utf-8")
    return Response(status, body, headers=headers or {}, drop=drop)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    """Build an answer in the contract's error shape."""
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


def _now_iso() -> str:
    """Return the current UTC time as ISO 8601 with a Z suffix."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _new_id(prefix: str) -> str:
    """Return a fresh opaque id such as job_3f2a...."""
    return f"{prefix}_{uuid.uuid4().hex}"


# --------------------------------------------------------------------------- configuration


@dataclass
class Busy:
    """Describe a burst of refused submits (429/503 with Retry-After)."""

    count: int = 0
    status: int = 429
    retry_after: float = 1.0


@dataclass
class SimConfig:
    """Hold the knobs that /_sim/config reads and merges."""

    job_seconds: float = 2.0
    latency: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LATENCY_ROUTES, 0.0))
    drop_after_accept: int = 0
    fail_history_writes: bool = False
    non_image_bytes: bool = False
    busy: Busy = field(default_factory=Busy)
    slow_download_seconds: float = 0.0
    fail_jobs: int = 0

    def as_json(self) -> JSON:
        """Return a JSON-ready copy."""
        return dataclasses.asdict(self)


def _bad_config(message: str) -> ApiError:
    """Build a 400 for a bad /_sim/config body."""
    return ApiError(400, "invalid_config", message)


def _as_seconds(name: str, value: Any) -> float:
    """Accept a finite number >= 0 (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_config(f"{name} must be a number of seconds.")
    if not math.isfinite(value) or value < 0:
        raise _bad_config(f"{name} must be a finite number >= 0.")
    return float(value)


def _as_count(name: str, value: Any) -> int:
    """Accept an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad_config(f"{name} must be an integer >= 0.")
    return value


def _as_bool(name: str, value: Any) -> bool:
    """Accept a JSON boolean only."""
    if not isinstance(value, bool):
        raise _bad_config(f"{name} must be true or false.")
    return value


def _merge_latency(current: dict[str, float], name: str, value: Any) -> dict[str, float]:
    """Merge per-route latencies into the current map."""
    if not isinstance(value, dict):
        raise _bad_config(f"{name} must be an object of route -> seconds.")
    unknown = sorted(set(value) - set(LATENCY_ROUTES))
    if unknown:
        raise _bad_config(f"Unknown latency routes {unknown}; use {list(LATENCY_ROUTES)}.")
    merged = dict(current)
    merged.update({k: _as_seconds(f"{name}.{k}", v) for k, v in value.items()})
    return merged


def _merge_busy(current: Busy, name: str, value: Any) -> Busy:
    """Merge count/status/retry_after into the current burst."""
    if not isinstance(value, dict):
        raise _bad_config(f"{name} must be an object with count, status, retry_after.")
    unknown = sorted(set(value) - {"count", "status", "retry_after"})
    if unknown:
        raise _bad_config(f"Unknown busy keys {unknown}.")
    busy = dataclasses.replace(current)
    if "count" in value:
        busy.count = _as_count(f"{name}.count", value["count"])
    if "status" in value:
        if value["status"] not in (429, 503) or isinstance(value["status"], bool):
            raise _bad_config(f"{name}.status must be 429 or 503.")
        busy.status = int(value["status"])
    if "retry_after" in value:
        busy.retry_after = _as_seconds(f"{name}.retry_after", value["retry_after"])
    return busy


_CONFIG_PARSERS: dict[str, Callable[[Any, str, Any], Any]] = {
    "job_seconds": lambda _cur, name, value: _as_seconds(name, value),
    "latency": _merge_latency,
    "drop_after_accept": lambda _cur, name, value: _as_count(name, value),
    "fail_history_writes": lambda _cur, name, value: _as_bool(name, value),
    "non_image_bytes": lambda _cur, name, value: _as_bool(name, value),
    "busy": _merge_busy,
    "slow_download_seconds": lambda _cur, name, value: _as_seconds(name, value),
    "fail_jobs": lambda _cur, name, value: _as_count(name, value),
}


def merged_config(config: SimConfig, patch: JSON) -> SimConfig:
    """Return a copy of config with patch applied; validate every key before changing any."""
    unknown = sorted(set(patch) - set(_CONFIG_PARSERS))
    if unknown:
        raise _bad_config(f"Unknown config keys {unknown}; known: {sorted(_CONFIG_PARSERS)}.")
    new = dataclasses.replace(
        config, latency=dict(config.latency), busy=dataclasses.replace(config.busy)
    )
    for key, value in patch.items():
        setattr(new, key, _CONFIG_PARSERS[key](getattr(config, key), key, value))
    return new


# --------------------------------------------------------------------------- job requests


@dataclass(frozen=True)
class JobSpec:
    """Hold a validated submit body."""

    kind: str
    provider: str
    model: str | None
    prompt: str
    frame: str
    source_metadata: JSON

    @property
    def source_app(self) -> str:
        return str(self.source_metadata["source_app"])


def _invalid(message: str) -> ApiError:
    """Build a 400 for a bad request body."""
    return ApiError(400, "invalid_request", message)


def _required_str(payload: JSON, name: str) -> str:
    """Return payload[name] if it is a non-empty string, else raise a 400."""
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise _invalid(f"{name} must be a non-empty string.")
    return value


def _source_metadata(value: Any) -> JSON:
    """Validate source_metadata: an object with at least source_app and task_id."""
    if not isinstance(value, dict):
        raise _invalid("source_metadata must be an object.")
    for name in ("source_app", "task_id"):
        _required_str(value, name)
    return value


def parse_job_spec(payload: JSON) -> JobSpec:
    """Validate a submit body as docs/ember.md describes it, raising 400 on the first problem."""
    if payload.get("kind") not in ("image", "clip"):
        raise _invalid('kind must be "image" or "clip".')
    if "model" not in payload or not isinstance(payload["model"], str | None):
        raise _invalid("model must be a string or null.")
    if not isinstance(payload.get("frame"), str):
        raise _invalid("frame must be a string.")
    references = payload.get("references")
    if not isinstance(references, list) or not all(isinstance(r, dict) for r in references):
        raise _invalid("references must be a list of objects.")
    return JobSpec(
        kind=payload["kind"],
        provider=_required_str(payload, "provider"),
        model=payload["model"],
        prompt=_required_str(payload, "prompt"),
        frame=payload["frame"],
        source_metadata=_source_metadata(payload.get("source_metadata")),
    )


# --------------------------------------------------------------------------- pictures


@dataclass(frozen=True)
class Picture:
    """Describe what to draw for one job."""

    seed: str  # task id + candidate: drives the colours, so candidates look different
    provider: str
    frame: str
    candidate: str
    stamp: str  # the job id, so even two identical requests give distinct bytes


@lru_cache(maxsize=32)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Return Pillow's bundled font at a size (bitmap fallback without FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError):
        return ImageFont.load_default()


def _clean(text: str, limit: int = 28) -> str:
    """Keep printable characters only; odd client input must not break drawing."""
    return "".join(ch for ch in text if ch.isprintable())[:limit]


def _palette(seed: str) -> tuple[RGB, RGB, RGB, RGB]:
    """Derive background, clothes, skin and hair colours from a seed."""
    d = hashlib.sha256(seed.encode("utf-8")).digest()
    background = (60 + d[0] % 170, 60 + d[1] % 170, 60 + d[2] % 170)
    clothes = (d[3] % 140, d[4] % 140, d[5] % 140)
    skin = SKIN_TONES[d[6] % len(SKIN_TONES)]
    hair = (d[7] % 90, d[8] % 70, d[9] % 50)
    return background, clothes, skin, hair


def _draw_figure(draw: ImageDraw.ImageDraw, size: int, colours: tuple[RGB, ...], bob: int) -> None:
    """Draw a head-and-shoulders silhouette, shifted vertically by bob pixels."""
    _, clothes, skin, hair = colours

    def box(x0: float, y0: float, x1: float, y1: float) -> tuple[int, int, int, int]:
        return (int(x0 * size), int(y0 * size) + bob, int(x1 * size), int(y1 * size) + bob)

    draw.ellipse(box(0.12, 0.68, 0.88, 1.30), fill=clothes)
    draw.rectangle(box(0.44, 0.55, 0.56, 0.76), fill=skin)
    draw.ellipse(box(0.33, 0.24, 0.67, 0.62), fill=skin)
    draw.chord(box(0.32, 0.21, 0.68, 0.50), 180, 360, fill=hair)
    draw.ellipse(box(0.41, 0.41, 0.45, 0.45), fill=(30, 30, 30))
    draw.ellipse(box(0.55, 0.41, 0.59, 0.45), fill=(30, 30, 30))
    draw.arc(box(0.44, 0.47, 0.56, 0.55), 20, 160, fill=(120, 40, 40), width=max(1, size // 128))


def _draw_labels(draw: ImageDraw.ImageDraw, size: int, picture: Picture) -> None:
    """Write provider, frame, #candidate and the job stamp, outlined so any colour reads."""
    pad = size // 32
    style: dict[str, Any] = {"fill": (255, 255, 255), "stroke_fill": (0, 0, 0)}
    draw.text((pad, pad), _clean(picture.provider), font=_font(size // 14), stroke_width=2, **style)
    draw.text(
        (pad, pad + size // 11),
        _clean(picture.frame),
        font=_font(size // 20),
        stroke_width=2,
        **style,
    )
    draw.text(
        (size - pad, pad),
        picture.candidate,
        font=_font(size // 7),
        anchor="ra",
        stroke_width=3,
        **style,
    )
    draw.text(
        (pad, size - pad),
        picture.stamp,
        font=_font(max(8, size // 36)),
        anchor="ls",
        stroke_width=1,
        **style,
    )


def _portrait(picture: Picture, size: int, bob: int = 0) -> Image.Image:
    """Draw one portrait frame."""
    colours = _palette(picture.seed)
    image = Image.new("RGB", (size, size), colours[0])
    draw = ImageDraw.Draw(image)
    _draw_figure(draw, size, colours, bob)
    _draw_labels(draw, size, picture)
    return image


def render_png(picture: Picture, size: int = IMAGE_SIZE) -> bytes:
    """Render a still portrait as PNG bytes."""
    buffer = io.BytesIO()
    _portrait(picture, size).save(buffer, format="PNG")
    return buffer.getvalue()


def render_clip(picture: Picture, size: int = CLIP_SIZE, frames: int = CLIP_FRAMES) -> bytes:
    """Render a looping animated WebP of the portrait nodding."""
    images = []
    for index in range(frames):
        bob = int(size * 0.03 * math.sin(2 * math.pi * index / frames))
        image = _portrait(picture, size, bob)
        # A progress bar makes every frame distinct, so the encoder cannot merge frames.
        ImageDraw.Draw(image).rectangle(
            (0, size - 4, (index + 1) * size // frames, size), fill=(255, 255, 255)
        )
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="WEBP",
        save_all=True,
        append_images=images[1:],
        duration=CLIP_FRAME_MS,
        loop=0,
        quality=80,
    )
    return buffer.getvalue()


# --------------------------------------------------------------------------- state


@dataclass
class Job:
    """Hold one generation job and, once finished, its outcome."""

    id: str
    spec: JobSpec
    idempotency_key: str | None
    via: str  # "jobs" (asynchronous door) or "generate" (synchronous door)
    created_at: str
    created_mono: float
    job_seconds: float  # captured at submit so later config changes do not move deadlines
    will_fail: bool
    finished: bool = False
    status: str = "queued"  # meaningful once finished; before that it is derived from time
    image_id: str | None = None
    history_id: str | None = None
    history_created_at: str | None = None
    history_error: str | None = None
    error: JSON | None = None
    replays: int = 0

    @property
    def task_id(self) -> str:
        return str(self.spec.source_metadata["task_id"])

    @property
    def source_app(self) -> str:
        return self.spec.source_app

    def submit_body(self) -> JSON:
        """Return the body of the original 202 answer (replays repeat it)."""
        return {"id": self.id, "status": "queued", "created_at": self.created_at}


@dataclass
class StoredImage:
    """Hold one result image; data is None once the retention cleanup removed it."""

    id: str
    job_id: str
    task_id: str
    source_app: str
    mime: str
    sha256: str
    size: int
    width: int
    height: int
    protected: bool
    data: bytes | None

    def as_json(self) -> JSON:
        """Describe the image for /_sim/images."""
        return {
            "id": self.id,
            "job_id": self.job_id,
            "task_id": self.task_id,
            "source_app": self.source_app,
            "sha256": self.sha256,
            "mime": self.mime,
            "bytes": self.size,
            "protected": self.protected,
            "removed": self.data is None,
        }


class SimulatorState:
    """Hold everything the simulator knows, in memory, behind one lock.

    Handler threads call these methods concurrently; each public method holds the lock for its
    whole body so every request sees and changes one consistent snapshot. Sleeps (latency, slow
    downloads) happen outside, in the HTTP layer, so a slow request never blocks the others.
    """

    def __init__(self, *, token: str, job_seconds: float) -> None:
        self.token = token
        self._default_job_seconds = job_seconds
        self._lock = threading.Lock()
        self.config = SimConfig(job_seconds=job_seconds)
        self.jobs: dict[str, Job] = {}
        self.images: dict[str, StoredImage] = {}
        self.history_order: list[str] = []  # job ids, in the order their rows were written
        self.idempotency: dict[tuple[str, str], str] = {}
        self.charges: dict[str, int] = {}
        self.requests: list[JSON] = []

    # ---- persistence (optional: a demo restarted must not forget its jobs, as Ember would not)

    def save(self, path: Path) -> None:
        """Write jobs, images, history and charges to `path` as JSON (atomically)."""
        with self._lock:
            now = time.monotonic()
            snapshot = {
                # Monotonic clocks do not survive a restart: keep each job's age instead.
                "jobs": [
                    {**dataclasses.asdict(job), "age": now - job.created_mono}
                    for job in self.jobs.values()
                ],
                "images": [
                    {
                        **dataclasses.asdict(image),
                        "data": None
                        if image.data is None
                        else base64.b64encode(image.data).decode(),
                    }
                    for image in self.images.values()
                ],
                "history_order": self.history_order,
                "idempotency": [[app, key, job] for (app, key), job in self.idempotency.items()],
                "charges": self.charges,
            }
            data = json.dumps(snapshot).encode()
        temp = path.with_suffix(".tmp")
        temp.write_bytes(data)
        os.replace(temp, path)

    def load(self, path: Path) -> None:
        """Read what `save` wrote, if the file exists (JSON only: nothing in it is run)."""
        if not path.exists():
            return
        snapshot = json.loads(path.read_bytes())
        with self._lock:
            now = time.monotonic()
            self.jobs = {}
            for raw in snapshot["jobs"]:
                age = raw.pop("age")
                job = Job(**{**raw, "spec": JobSpec(**raw["spec"])})
                job.created_mono = now - age
                self.jobs[job.id] = job
            self.images = {}
            for raw in snapshot["images"]:
                data = None if raw["data"] is None else base64.b64decode(raw["data"])
                self.images[raw["id"]] = StoredImage(**{**raw, "data": data})
            self.history_order = list(snapshot["history_order"])
            self.idempotency = {(app, key): job for app, key, job in snapshot["idempotency"]}
            self.charges = dict(snapshot["charges"])

    # ---- bookkeeping

    def reset(self) -> None:
        """Forget every job, image, charge and logged request; restore the default config."""
        with self._lock:
            self.config = SimConfig(job_seconds=self._default_job_seconds)
            self.jobs.clear()
            self.images.clear()
            self.history_order.clear()
            self.idempotency.clear()
            self.charges.clear()
            self.requests.clear()

    def authorized(self, header: str | None) -> bool:
        """Check an Authorization header against the bearer token, in constant time."""
        expected = f"Bearer {self.token}".encode()
        return hmac.compare_digest((header or "").encode(), expected)

    def log_request(self, request: Request) -> JSON:
        """Append a request to the log (status filled in later) and return the entry."""
        entry: JSON = {
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "time": _now_iso(),
            "status": None,
        }
        with self._lock:
            self.requests.append(entry)
        return entry

    def set_logged_status(self, entry: JSON, status: int | None) -> None:
        """Record the status a logged request was answered with (None: dropped)."""
        with self._lock:
            entry["status"] = status

    def latency(self, route: str) -> float:
        """Return the configured delay for a route name."""
        with self._lock:
            return self.config.latency.get(route, 0.0)

    # ---- config

    def config_json(self) -> JSON:
        """Return the current config."""
        with self._lock:
            return self.config.as_json()

    def update_config(self, patch: JSON) -> JSON:
        """Merge patch into the config (all keys or none) and return the result."""
        with self._lock:
            self.config = merged_config(self.config, patch)
            return self.config.as_json()

    def _consume(self, knob: str) -> bool:
        """Decrement a countdown knob (drop_after_accept, fail_jobs); say whether it fired."""
        remaining = getattr(self.config, knob)
        if remaining <= 0:
            return False
        setattr(self.config, knob, remaining - 1)
        return True

    def take_busy(self) -> Busy | None:
        """Consume one refused submit from the busy burst, if any is left."""
        with self._lock:
            busy = self.config.busy
            if busy.count <= 0:
                return None
            busy.count -= 1
            return dataclasses.replace(busy)

    # ---- jobs

    def submit(self, spec: JobSpec, key: str | None) -> tuple[JSON, bool, bool]:
        """Accept a submit; return (202 body, replayed?, drop the connection?)."""
        with self._lock:
            original = self._replayed(spec, key)
            if original is not None:
                original.replays += 1
                body = original.submit_body()
            else:
                body = self._new_job(spec, key, "jobs", self._consume("fail_jobs")).submit_body()
            return body, original is not None, self._consume("drop_after_accept")

    def generate(self, spec: JobSpec) -> JSON:
        """Run a job to completion at once (the synchronous door) and return its 201 body."""
        with self._lock:
            job = self._new_job(spec, None, "generate", will_fail=False)
            self._finish(job)
            return {"id": job.id, "status": job.status, "result": self._result(job)}

    def poll(self, job_id: str) -> JSON:
        """Return a job's poll body, finishing it first if it is due."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise ApiError(404, "not_found", f"Ember does not know job {job_id}.")
            return self._view(job)

    def _replayed(self, spec: JobSpec, key: str | None) -> Job | None:
        """Find the clip job an Idempotency-Key already created for this app."""
        if spec.kind != "clip" or key is None:
            return None
        job_id = self.idempotency.get((spec.source_app, key))
        return self.jobs.get(job_id) if job_id else None

    def _new_job(self, spec: JobSpec, key: str | None, via: str, will_fail: bool) -> Job:
        """Create, register and charge a new job."""
        job = Job(
            id=_new_id("job"),
            spec=spec,
            idempotency_key=key,
            via=via,
            created_at=_now_iso(),
            created_mono=time.monotonic(),
            job_seconds=self.config.job_seconds,
            will_fail=will_fail,
        )
        self.jobs[job.id] = job
        if spec.kind == "clip" and key is not None:
            self.idempotency[(spec.source_app, key)] = job.id
        self.charges[job.task_id] = self.charges.get(job.task_id, 0) + 1
        return job

    def _observe(self, job: Job) -> str:
        """Return a job's status now; finish it (once) if its time has come."""
        if job.finished:
            return job.status
        elapsed = time.monotonic() - job.created_mono
        if elapsed >= job.job_seconds:
            self._finish(job)
            return job.status
        return "running" if elapsed >= job.job_seconds / 2 else "queued"

    def _observe_all(self) -> None:
        """Observe every job, so every due one is finished."""
        for job in list(self.jobs.values()):
            self._observe(job)

    def _finish(self, job: Job) -> None:
        """Settle a due job: refuse it, or draw its image and write its history row."""
        if job.will_fail:
            job.status, job.error, job.finished = "failed", dict(CONTENT_POLICY), True
            return
        image = self._store_image(job)  # draw first: if drawing fails the job stays unfinished
        job.image_id, job.status, job.finished = image.id, "succeeded", True
        if self.config.fail_history_writes:
            job.history_error = HISTORY_FAILURE
        else:
            self._write_history(job)

    def _store_image(self, job: Job) -> StoredImage:
        """Draw and keep the job's image; exploration results start protected."""
        meta = job.spec.source_metadata
        picture = Picture(
            seed=f"{job.task_id}:{meta.get('candidate')}",
            provider=job.spec.provider,
            frame=job.spec.frame,
            candidate=f"#{_clean(str(meta.get('candidate', '?')), 6)}",
            stamp=job.id,
        )
        clip = job.spec.kind == "clip"
        data = render_clip(picture) if clip else render_png(picture)
        side = CLIP_SIZE if clip else IMAGE_SIZE
        image = StoredImage(
            id=_new_id("img"),
            job_id=job.id,
            task_id=job.task_id,
            source_app=job.source_app,
            mime="image/webp" if clip else "image/png",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            width=side,
            height=side,
            protected=meta.get("purpose") == "exploration",
            data=data,
        )
        self.images[image.id] = image
        return image

    def _write_history(self, job: Job) -> None:
        """Write (or repair) a job's history row."""
        job.history_id = _new_id("hist")
        job.history_created_at = _now_iso()
        job.history_error = None
        self.history_order.append(job.id)

    def _result(self, job: Job) -> JSON:
        """Build a succeeded job's result exactly as docs/ember.md shows it."""
        assert job.image_id is not None
        image = self.images[job.image_id]
        return {
            "image": {
                "id": image.id,
                "mime": image.mime,
                "sha256": image.sha256,
                "bytes": image.size,
                "metadata": {
                    "provider": job.spec.provider,
                    "model": job.spec.model or f"{job.spec.provider}-default",
                    "width": image.width,
                    "height": image.height,
                },
            },
            "history": {"id": job.history_id} if job.history_id else None,
            "history_error": job.history_error,
        }

    def _view(self, job: Job) -> JSON:
        """Build a poll body: id, status, and result or error when settled."""
        status = self._observe(job)
        view: JSON = {"id": job.id, "status": status}
        if status == "succeeded":
            view["result"] = self._result(job)
        elif status == "failed":
            view["error"] = dict(job.error or CONTENT_POLICY)
        return view

    # ---- images and history

    def image_file(self, image_id: str) -> tuple[bytes, str, float]:
        """Return (bytes, content type, delay before the body) for the file route."""
        with self._lock:
            image = self.images.get(image_id)
            if image is None:
                raise ApiError(404, "not_found", f"Ember has no image {image_id}.")
            if image.data is None:
                raise ApiError(404, "not_found", f"Image {image_id} no longer exists.")
            delay = self.config.slow_download_seconds
            if self.config.non_image_bytes:
                return NOT_AN_IMAGE, "image/png", delay
            return image.data, image.mime, delay

    def release(self, image_id: str) -> JSON:
        """Drop an image's protection (the durable-copy acknowledgement)."""
        with self._lock:
            image = self.images.get(image_id)
            if image is None:
                raise ApiError(404, "not_found", f"Ember has no image {image_id}.")
            image.protected = False
            return {"id": image.id, "protected": False}

    def history(self, source_app: str, task_id: str | None) -> JSON:
        """Return the history rows of an app (optionally one task), finishing due jobs first."""
        with self._lock:
            matching = {
                job.id
                for job in self.jobs.values()
                if job.source_app == source_app and task_id in (None, job.task_id)
            }
            for job_id in matching:
                self._observe(self.jobs[job_id])
            rows = [self._history_row(self.jobs[j]) for j in self.history_order if j in matching]
            return {"items": rows}

    def _history_row(self, job: Job) -> JSON:
        """Build one history row; its result repeats the job's result."""
        return {
            "id": job.history_id,
            "job_id": job.id,
            "image_id": job.image_id,
            "created_at": job.history_created_at,
            "source_metadata": job.spec.source_metadata,
            "result": self._result(job),
        }

    # ---- /_sim controls

    def repair_history(self, task_id: str | None = None) -> list[str]:
        """Write the missing history rows of finished jobs; return the repaired job ids."""
        with self._lock:
            self._observe_all()
            repaired = []
            for job in self.jobs.values():
                missing = job.status == "succeeded" and job.history_id is None
                if missing and task_id in (None, job.task_id):
                    self._write_history(job)
                    repaired.append(job.id)
            return repaired

    def cleanup(self, source_app: str) -> list[str]:
        """Run the retention pass: delete the bytes of unprotected images of one app."""
        with self._lock:
            self._observe_all()
            removed = []
            for image in self.images.values():
                if image.source_app == source_app and not image.protected and image.data:
                    image.data = None
                    removed.append(image.id)
            return removed

    def jobs_json(self) -> JSON:
        """List every job (finishing due ones, as any observation does)."""
        with self._lock:
            self._observe_all()
            return {"items": [self._job_row(job) for job in self.jobs.values()]}

    def _job_row(self, job: Job) -> JSON:
        """Describe a job for /_sim/jobs."""
        return {
            "id": job.id,
            "kind": job.spec.kind,
            "status": self._observe(job),
            "task_id": job.task_id,
            "source_app": job.source_app,
            "provider": job.spec.provider,
            "idempotency_key": job.idempotency_key,
            "image_id": job.image_id,
            "history_id": job.history_id,
            "via": job.via,
            "replays": job.replays,
            "created_at": job.created_at,
        }

    def images_json(self) -> JSON:
        """List every image, removed ones included."""
        with self._lock:
            self._observe_all()
            return {"items": [image.as_json() for image in self.images.values()]}

    def charges_json(self) -> JSON:
        """Return paid jobs per task id and in total."""
        with self._lock:
            return {"charges": dict(self.charges), "total": sum(self.charges.values())}

    def requests_json(self) -> JSON:
        """Return the log of every non-/_sim request, in arrival order."""
        with self._lock:
            return {"items": [dict(entry) for entry in self.requests]}


# --------------------------------------------------------------------------- routes

RouteHandler = Callable[[SimulatorState, Request, re.Match[str]], Response]


@dataclass(frozen=True)
class Route:
    """Bind a method and path pattern to a handler; name picks the latency knob."""

    method: str
    pattern: re.Pattern[str]
    name: str
    handler: RouteHandler


def _submit(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Accept a job: busy burst first, then validation, idempotency, charge, maybe a drop."""
    busy = state.take_busy()
    if busy is not None:
        retry = {"Retry-After": str(math.ceil(busy.retry_after))}
        code = "rate_limited" if busy.status == 429 else "unavailable"
        return error_response(busy.status, code, "Ember is busy (simulated); retry later.", retry)
    spec = parse_job_spec(request.json())
    key = (request.header("Idempotency-Key") or "").strip() or None
    if spec.kind == "clip" and key is None:
        raise ApiError(400, "missing_idempotency_key", "A clip submit needs an Idempotency-Key.")
    body, replayed, drop = state.submit(spec, key)
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    return json_response(202, body, headers, drop=drop)


def _poll(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.poll(match["job_id"]))


def _fetch(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    data, mime, delay = state.image_file(match["image_id"])
    return Response(200, data, content_type=mime, body_delay=delay)


def _release(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Take the durable-copy acknowledgement and unprotect the image."""
    payload = request.json()
    if payload.get("protected") is not False or not isinstance(
        payload.get("durable_copy", True), bool
    ):
        raise _invalid('The body must be {"protected": false, "durable_copy": true}.')
    return json_response(200, state.release(match["image_id"]))


def _history(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    source_app = request.param("source_app")
    if not source_app:
        raise _invalid("The source_app query parameter is required.")
    return json_response(200, state.history(source_app, request.param("task_id")))


def _generate(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(201, state.generate(parse_job_spec(request.json())))


def _sim_get_config(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.config_json())


def _sim_set_config(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    return json_response(200, state.update_config(request.json()))


def _sim_repair(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Write missing history rows, for one task when the body names it."""
    task_id = request.json_or_empty().get("task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise _invalid("task_id must be a string.")
    return json_response(200, {"repaired": state.repair_history(task_id)})


def _sim_cleanup(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    """Run the retention pass for the app named in the body."""
    source_app = _required_str(request.json(), "source_app")
    return json_response(200, {"removed": state.cleanup(source_app)})


def _sim_reset(state: SimulatorState, request: Request, match: re.Match[str]) -> Response:
    state.reset()
    return json_response(200, {"reset": True})


def _lister(method: Callable[[SimulatorState], JSON]) -> RouteHandler:
    """Wrap a state listing method as a GET handler."""
    return lambda state, request, match: json_response(200, method(state))


def _route(method: str, pattern: str, name: str, handler: RouteHandler) -> Route:
    """Build a Route from a path regex."""
    return Route(method, re.compile(pattern), name, handler)


_API_ROUTES = (
    _route("POST", r"/api/v1/api-generators/jobs", "submit", _submit),
    _route("GET", r"/api/v1/api-generators/jobs/(?P<job_id>[^/]+)", "poll", _poll),
    _route("GET", r"/api/v1/images/(?P<image_id>[^/]+)/file", "fetch", _fetch),
    _route("PATCH", r"/api/v1/explorations/(?P<image_id>[^/]+)/protection", "release", _release),
    _route("GET", r"/api/v1/history", "history", _history),
    _route("POST", r"/api/v1/api-generators/generate", "generate", _generate),
)
_SIM_ROUTES = (
    _route("GET", r"/_sim/config", "", _sim_get_config),
    _route("POST", r"/_sim/config", "", _sim_set_config),
    _route("POST", r"/_sim/history/repair", "", _sim_repair),
    _route("POST", r"/_sim/cleanup", "", _sim_cleanup),
    _route("POST", r"/_sim/reset", "", _sim_reset),
    _route("GET", r"/_sim/jobs", "", _lister(SimulatorState.jobs_json)),
    _route("GET", r"/_sim/images", "", _lister(SimulatorState.images_json)),
    _route("GET", r"/_sim/charges", "", _lister(SimulatorState.charges_json)),
    _route("GET", r"/_sim/requests", "", _lister(SimulatorState.requests_json)),
)


def _find_route(routes: tuple[Route, ...], request: Request) -> tuple[Route, re.Match[str]]:
    """Pick the route for a request, or raise 404 (no such path) / 405 (wrong method)."""
    allowed = []
    for route in routes:
        match = route.pattern.fullmatch(request.path)
        if match is None:
            continue
        if route.method == request.method:
            return route, match
        allowed.append(route.method)
    if allowed:
        message = f"{request.method} is not allowed on {request.path}."
        raise ApiError(405, "method_not_allowed", message, {"Allow": ", ".join(sorted(allowed))})
    raise ApiError(404, "not_found", f"No route for {request.path}.")


def _run(routes: tuple[Route, ...], state: SimulatorState, request: Request) -> Response:
    """Route and run a request, turning every failure into the contract's error shape."""
    try:
        route, match = _find_route(routes, request)
        delay = state.latency(route.name) if route.name else 0.0
        if delay > 0:
            time.sleep(delay)
        return route.handler(state, request, match)
    except ApiError as exc:
        return exc.response()
    except Exception:
        # A simulator bug must still answer JSON, never a traceback; the trace goes to stderr.
        traceback.print_exc(file=sys.stderr)
        return error_response(500, "internal", "The simulator hit an unexpected error.")


def dispatch(state: SimulatorState, request: Request) -> Response:
    """Answer one request: /_sim controls directly, Ember routes behind auth and logged."""
    if request.path == "/_sim" or request.path.startswith("/_sim/"):
        return _run(_SIM_ROUTES, state, request)
    entry = state.log_request(request)
    if state.authorized(request.header("Authorization")):
        response = _run(_API_ROUTES, state, request)
    else:
        response = error_response(401, "unauthorized", "Missing or wrong bearer token.")
    state.set_logged_status(entry, None if response.drop else response.status)
    return response


# --------------------------------------------------------------------------- HTTP server


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
        return dispatch(self.server.state, request)

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

    def __init__(self, address: tuple[str, int], state: SimulatorState, verbose: bool) -> None:
        self.state = state
        self.verbose = verbose
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

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
        self.state_file = state_file
        if state_file is not None:
            self.state.load(state_file)
        self._server = _EmberServer((host, port), self.state, verbose)
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
        if self.state_file is not None:
            self.state.save(self.state_file)
