"""Describe jobs and their images: the validated submit body, the job, the stored result."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from studio.drawing import CLIP_SIZE, IMAGE_SIZE, Picture, printable, render_clip, render_png
from studio.ember.simulator.wire import JSON, invalid, required_str

CONTENT_POLICY = {
    "code": "content_policy",
    "message": "The prompt was refused by the provider (simulated).",
}


def now_iso() -> str:
    """Return the current UTC time as ISO 8601 with a Z suffix."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    """Return a fresh opaque id such as job_3f2a...."""
    return f"{prefix}_{uuid.uuid4().hex}"


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


def _source_metadata(value: Any) -> JSON:
    """Validate source_metadata: an object with at least source_app and task_id."""
    if not isinstance(value, dict):
        raise invalid("source_metadata must be an object.")
    for name in ("source_app", "task_id"):
        required_str(value, name)
    return value


def parse_job_spec(payload: JSON) -> JobSpec:
    """Validate a submit body as docs/ember.md describes it, raising 400 on the first problem."""
    if payload.get("kind") not in ("image", "clip"):
        raise invalid('kind must be "image" or "clip".')
    if "model" not in payload or not isinstance(payload["model"], str | None):
        raise invalid("model must be a string or null.")
    if not isinstance(payload.get("frame"), str):
        raise invalid("frame must be a string.")
    references = payload.get("references")
    if not isinstance(references, list) or not all(isinstance(r, dict) for r in references):
        raise invalid("references must be a list of objects.")
    return JobSpec(
        kind=payload["kind"],
        provider=required_str(payload, "provider"),
        model=payload["model"],
        prompt=required_str(payload, "prompt"),
        frame=payload["frame"],
        source_metadata=_source_metadata(payload.get("source_metadata")),
    )


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

    def picture(self) -> Picture:
        """Describe the job's portrait: colours per task and candidate, stamped with the job id."""
        meta = self.spec.source_metadata
        return Picture(
            seed=f"{self.task_id}:{meta.get('candidate')}",
            provider=self.spec.provider,
            frame=self.spec.frame,
            candidate=f"#{printable(str(meta.get('candidate', '?')), 6)}",
            stamp=self.id,
        )


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

    @classmethod
    def draw(cls, job: Job) -> StoredImage:
        """Draw a job's result: a PNG still or a WebP clip; exploration results start protected."""
        clip = job.spec.kind == "clip"
        data = render_clip(job.picture()) if clip else render_png(job.picture())
        side = CLIP_SIZE if clip else IMAGE_SIZE
        return cls(
            id=new_id("img"),
            job_id=job.id,
            task_id=job.task_id,
            source_app=job.source_app,
            mime="image/webp" if clip else "image/png",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            width=side,
            height=side,
            protected=job.spec.source_metadata.get("purpose") == "exploration",
            data=data,
        )

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
