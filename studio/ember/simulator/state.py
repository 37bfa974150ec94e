"""Keep everything the simulator knows in memory behind one lock, and in a state file on request."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

from studio.ember.simulator.jobs import CONTENT_POLICY, Job, JobSpec, StoredImage, new_id, now_iso
from studio.ember.simulator.knobs import Busy, SimConfig, merged_config
from studio.ember.simulator.wire import JSON, ApiError, Request

NOT_AN_IMAGE = b"<html>not an image</html>"
HISTORY_FAILURE = "Ember could not write the history row (simulated)."


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
        # Counts every change a state file must keep (ledger.py saves when it moved).
        self.changes = 0
        # A job's image is drawn while the job runs, as Ember renders during the job: the
        # poll that finds it done only keeps it (jobs submitted together end together,
        # and drawing them all then made the last answer wait for every other drawing).
        self._painter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-draw")
        self._drawings: dict[str, Future[StoredImage]] = {}

    def close(self) -> None:
        """Stop drawing: drawings not started are dropped (their jobs draw when finished)."""
        self._painter.shutdown(wait=False, cancel_futures=True)

    # ---- persistence (optional: a demo restarted must not forget its jobs, as Ember would not)

    def snapshot(self) -> tuple[int, JSON, dict[str, bytes]]:
        """Return the change count, the state as JSON and the images' bytes by id, at once."""
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
                        field.name: getattr(image, field.name)
                        for field in dataclasses.fields(image)
                        if field.name != "data"
                    }
                    for image in self.images.values()
                ],
                "history_order": list(self.history_order),
                "idempotency": [[app, key, job] for (app, key), job in self.idempotency.items()],
                "charges": dict(self.charges),
            }
            data = {image.id: image.data for image in self.images.values() if image.data}
            return self.changes, snapshot, data

    def restore(self, snapshot: JSON, data: dict[str, bytes]) -> None:
        """Take back what `snapshot` returned (the images' bytes apart, by id)."""
        with self._lock:
            now = time.monotonic()
            self.jobs = {}
            for raw in snapshot["jobs"]:
                age = raw.pop("age")
                job = Job(**{**raw, "spec": JobSpec(**raw["spec"])})
                job.created_mono = now - age
                self.jobs[job.id] = job
            self.images = {
                raw["id"]: StoredImage(**{**raw, "data": data.get(raw["id"])})
                for raw in snapshot["images"]
            }
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
            self.changes += 1

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
            "time": now_iso(),
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
                self.changes += 1
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
        """Return a job's poll body, finishing it first if it is due.

        A due job's image, drawn while it ran, is waited for (or drawn) outside the
        lock: other requests are answered meanwhile, and a job another request
        finished first keeps its own image.
        """
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise ApiError(404, "not_found", f"Ember does not know job {job_id}.")
            due = not job.finished and not job.will_fail and self._elapsed(job) >= job.job_seconds
            drawing = self._drawings.get(job.id) if due else None
        drawn = _wait_for(drawing, job) if due else None
        with self._lock:
            if drawn is not None and not job.finished:
                self._finish(job, drawn)
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
            id=new_id("job"),
            spec=spec,
            idempotency_key=key,
            via=via,
            created_at=now_iso(),
            created_mono=time.monotonic(),
            job_seconds=self.config.job_seconds,
            will_fail=will_fail,
        )
        self.jobs[job.id] = job
        self.changes += 1
        if not will_fail:
            # Once closing, the painter refuses: the job draws its image when it is finished.
            with contextlib.suppress(RuntimeError):
                self._drawings[job.id] = self._painter.submit(StoredImage.draw, job)
        if spec.kind == "clip" and key is not None:
            self.idempotency[(spec.source_app, key)] = job.id
        self.charges[job.task_id] = self.charges.get(job.task_id, 0) + 1
        return job

    def _observe(self, job: Job) -> str:
        """Return a job's status now; finish it (once) if its time has come."""
        if job.finished:
            return job.status
        elapsed = self._elapsed(job)
        if elapsed >= job.job_seconds:
            self._finish(job)
            return job.status
        return "running" if elapsed >= job.job_seconds / 2 else "queued"

    @staticmethod
    def _elapsed(job: Job) -> float:
        """Return the seconds since the job was created."""
        return time.monotonic() - job.created_mono

    def _observe_all(self) -> None:
        """Observe every job, so every due one is finished."""
        for job in list(self.jobs.values()):
            self._observe(job)

    def _finish(self, job: Job, drawn: StoredImage | None = None) -> None:
        """Settle a due job: refuse it, or keep its image (`drawn`, or drawn now) and history."""
        if job.will_fail:
            job.status, job.error, job.finished = "failed", dict(CONTENT_POLICY), True
            self.changes += 1
            return
        # Draw first: if drawing fails the job stays unfinished.
        image = self._store_image(job, drawn)
        job.image_id, job.status, job.finished = image.id, "succeeded", True
        if self.config.fail_history_writes:
            job.history_error = HISTORY_FAILURE
        else:
            self._write_history(job)

    def _store_image(self, job: Job, drawn: StoredImage | None = None) -> StoredImage:
        """Keep the job's image: `drawn`, or the one drawn while it ran, or one drawn now."""
        drawing = self._drawings.pop(job.id, None)
        if drawn is None and drawing is not None:
            # Under the lock: wait only for a drawing already made, else draw now.
            drawn = drawing.result() if drawing.done() and not drawing.cancelled() else None
            drawing.cancel()  # no use any more if it has not started
        image = drawn or StoredImage.draw(job)
        self.images[image.id] = image
        self.changes += 1
        return image

    def _write_history(self, job: Job) -> None:
        """Write (or repair) a job's history row."""
        job.history_id = new_id("hist")
        job.history_created_at = now_iso()
        job.history_error = None
        self.history_order.append(job.id)
        self.changes += 1

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
        """Drop an image's protection (the durable-copy acknowledgement).

        404 once the retention pass removed the image, as its file route answers: Ember no
        longer has it (a review's own Ember answered so, and the worker met it on restart).
        """
        with self._lock:
            image = self.images.get(image_id)
            if image is None or image.data is None:
                raise ApiError(404, "not_found", f"Ember has no image {image_id}.")
            image.protected = False
            self.changes += 1
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
                    self.changes += 1
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


def _wait_for(drawing: Future[StoredImage] | None, job: Job) -> StoredImage:
    """Return the image drawn for `job` while it ran, or draw it now (none was, or dropped)."""
    if drawing is not None:
        try:
            return drawing.result()
        except CancelledError:
            pass
    return StoredImage.draw(job)
