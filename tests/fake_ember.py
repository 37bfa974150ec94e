"""A respx-backed Ember for unit tests of the worker: jobs succeed at the first poll."""

import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import respx

from tests.factories import ember_result, png_bytes

JOBS = "/api/v1/api-generators/jobs"


class FakeEmber:
    """Answers docs/ember.md's routes from memory and records what it was asked."""

    def __init__(self, router: respx.Router, *, history: bool = True, first: int = 1) -> None:
        """`first`: the number of its first job (`job_<n>`), past those of an earlier fake."""
        self.router = router
        self.history = history
        self.submits: list[dict[str, Any]] = []
        self.submit_headers: list[httpx.Headers] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.images: dict[str, bytes] = {}
        self.keys: dict[str, str] = {}
        self.charged: Counter[str] = Counter()
        self.history_rows: dict[str, str] = {}  # job id -> its history row's own id
        self.lose_answers = 0  # how many accepted submits' answers to drop on the way back
        self.placeholder: bytes | None = None  # when set, every new image has these bytes
        self._ids = itertools.count(first)
        self.submit_route = router.post(JOBS).mock(side_effect=self._submit)
        self.poll_route = router.get(path__regex=rf"^{JOBS}/(?P<job_id>[^/]+)$").mock(
            side_effect=self._poll
        )
        self.file_route = router.get(path__regex=r"^/api/v1/images/(?P<image_id>[^/]+)/file$").mock(
            side_effect=self._file
        )
        self.release_route = router.patch(
            path__regex=r"^/api/v1/explorations/(?P<image_id>[^/]+)/protection$"
        ).mock(return_value=httpx.Response(200, json={"protected": False}))
        self.history_route = router.get("/api/v1/history").mock(side_effect=self._history)
        self.generate_route = router.post("/api/v1/api-generators/generate").mock(
            return_value=httpx.Response(500)
        )

    def _submit(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.submits.append(body)
        self.submit_headers.append(request.headers)
        key = request.headers.get("Idempotency-Key")
        if key and key in self.keys:
            job_id = self.keys[key]
            return httpx.Response(
                202,
                json={"id": job_id, "status": "queued"},
                headers={"Idempotent-Replayed": "true"},
            )
        n = next(self._ids)
        self.charged[body["source_metadata"]["task_id"]] += 1
        job_id = f"job_{n}"
        if key:
            self.keys[key] = job_id
        data = self.placeholder or png_bytes(n)
        image_id = f"img_{n}"
        self.images[image_id] = data
        self.jobs[job_id] = {
            "body": body,
            "result": ember_result(
                image_id,
                f"hist_{n}" if self.history else None,
                data=data,
                metadata={"provider": body["provider"], "model": body["model"]},
            ),
        }
        if self.history:
            self.history_rows[job_id] = f"hist_{n}"
        if self.lose_answers:
            # Ember took (and charged) the job; only its answer never reaches the caller.
            self.lose_answers -= 1
            raise httpx.ReadError("The connection dropped before Ember's answer arrived.")
        return httpx.Response(202, json={"id": job_id, "status": "queued"})

    def _poll(self, request: httpx.Request, job_id: str) -> httpx.Response:
        job = self.jobs.get(job_id)
        if job is None:
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no job"}})
        return httpx.Response(
            200, json={"id": job_id, "status": "succeeded", "result": job["result"]}
        )

    def _file(self, request: httpx.Request, image_id: str) -> httpx.Response:
        return httpx.Response(
            200, content=self.images[image_id], headers={"Content-Type": "image/png"}
        )

    def _history(self, request: httpx.Request) -> httpx.Response:
        task_id = request.url.params["task_id"]
        items = [
            {
                "id": row_id,
                "job_id": job_id,
                "image_id": self.jobs[job_id]["result"]["image"]["id"],
                "source_metadata": self.jobs[job_id]["body"]["source_metadata"],
                "result": self.jobs[job_id]["result"],
            }
            for job_id, row_id in self.history_rows.items()
            if self.jobs[job_id]["body"]["source_metadata"]["task_id"] == task_id
        ]
        return httpx.Response(200, json={"items": items})

    def repair_history(self, *, result_too: bool = True) -> None:
        """Write the history rows Ember failed to write (as Ember's repair would).

        With `result_too=False` only the rows are written: their nested `result`
        still says `history: null`, as the job's answer did.
        """
        for job_id, job in self.jobs.items():
            if job_id in self.history_rows:
                continue
            self.history_rows[job_id] = f"hist_{job_id}"
            if result_too:
                job["result"]["history"] = {"id": f"hist_{job_id}"}
                job["result"]["history_error"] = None

    def charges(self, task_id: str) -> int:
        """How many new (paid) jobs this task caused."""
        return self.charged[task_id]


def catch_strays(router: respx.Router) -> respx.Route:
    """Answer 404 to any request no other route claims, so it is on record (add it last)."""
    return router.route().respond(404, json={"error": {"code": "not_found", "message": "stray"}})


def seen(router: respx.Router) -> list[str]:
    """Return the requests Ember saw, in order, as "METHOD path"."""
    return [f"{c.request.method} {c.request.url.path}" for c in router.calls]


def flood(total: int, counter: list[int], *, chunk: int = 64 * 1024) -> AsyncIterator[bytes]:
    """Stream `total` bytes in chunks, adding what was taken to `counter[0]`."""

    async def chunks() -> AsyncIterator[bytes]:
        while counter[0] < total:
            part = b"\0" * min(chunk, total - counter[0])
            counter[0] += len(part)
            yield part

    return chunks()
