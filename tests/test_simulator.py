"""The Ember simulator over real loopback HTTP: docs/ember.md plus the /_sim controls."""

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from studio.ember.simulator import Simulator

JOBS = "/api/v1/api-generators/jobs"
APP = "cwkAvatars"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(port=0, job_seconds=0).start()
    yield simulator
    simulator.stop()


@pytest.fixture
def client(sim: Simulator) -> Iterator[httpx.Client]:
    """An authorised client; /_sim calls go through it too (they ignore the header)."""
    headers = {"Authorization": "Bearer dev-token"}
    with httpx.Client(base_url=sim.url, headers=headers, timeout=10) as http:
        yield http


def job_body(
    kind: str = "image", task_id: str = "task-1", candidate: int = 1, **meta: Any
) -> dict[str, Any]:
    metadata = {
        "source_app": APP,
        "purpose": "exploration",
        "batch_id": "batch-1",
        "task_id": task_id,
        "attempt": 1,
        "subjects": ["Ada"],
        "frame": "image",
        "candidate": candidate,
        **meta,
    }
    return {
        "kind": kind,
        "provider": "openai",
        "model": None,
        "prompt": "a friendly portrait, watercolour",
        "frame": "image",
        "references": [],
        "source_metadata": metadata,
    }


def submit(client: httpx.Client, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(JOBS, json=body, headers=headers)


def finished(client: httpx.Client, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """Submit a job and return its first poll (job_seconds=0: already settled)."""
    answer = submit(client, body, key)
    assert answer.status_code == 202, answer.text
    poll = client.get(f"{JOBS}/{answer.json()['id']}")
    assert poll.status_code == 200
    return poll.json()


def configure(client: httpx.Client, **config: Any) -> dict[str, Any]:
    answer = client.post("/_sim/config", json=config)
    assert answer.status_code == 200, answer.text
    return answer.json()


def charges(client: httpx.Client) -> dict[str, Any]:
    return client.get("/_sim/charges").json()


def assert_error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_requests_without_the_bearer_token_get_401(sim: Simulator) -> None:
    with httpx.Client(base_url=sim.url) as anonymous:
        assert_error(anonymous.post(JOBS, json=job_body()), 401)
        wrong = {"Authorization": "Bearer nope"}
        assert_error(anonymous.get(f"{JOBS}/job_x", headers=wrong), 401)
        assert anonymous.get("/_sim/charges").json() == {"charges": {}, "total": 0}


def test_submit_poll_fetch_gives_a_real_png_matching_its_hash(client: httpx.Client) -> None:
    answer = submit(client, job_body())
    assert answer.status_code == 202
    accepted = answer.json()
    assert accepted["id"].startswith("job_")
    assert accepted["status"] == "queued"
    assert accepted["created_at"]

    job = client.get(f"{JOBS}/{accepted['id']}").json()
    assert job["status"] == "succeeded"
    result = job["result"]
    assert result["history"]["id"].startswith("hist_")
    assert result["history_error"] is None
    image = result["image"]
    assert image["id"].startswith("img_")
    assert image["mime"] == "image/png"
    assert image["metadata"]["provider"] == "openai"
    assert isinstance(image["metadata"]["model"], str)

    file = client.get(f"/api/v1/images/{image['id']}/file")
    assert file.status_code == 200
    assert file.headers["content-type"] == "image/png"
    assert len(file.content) == image["bytes"]
    assert hashlib.sha256(file.content).hexdigest() == image["sha256"]
    decoded = Image.open(io.BytesIO(file.content))
    decoded.load()
    assert decoded.format == "PNG"
    assert decoded.size == (image["metadata"]["width"], image["metadata"]["height"])


def test_jobs_move_from_queued_to_running_to_succeeded(client: httpx.Client) -> None:
    configure(client, job_seconds=1.0)
    job_id = submit(client, job_body()).json()["id"]
    assert client.get(f"{JOBS}/{job_id}").json()["status"] == "queued"
    time.sleep(0.6)
    assert client.get(f"{JOBS}/{job_id}").json()["status"] == "running"
    time.sleep(0.6)
    assert client.get(f"{JOBS}/{job_id}").json()["status"] == "succeeded"


def test_two_candidates_get_different_images(client: httpx.Client) -> None:
    first = finished(client, job_body(candidate=1))["result"]["image"]
    second = finished(client, job_body(candidate=2))["result"]["image"]
    assert first["id"] != second["id"]
    assert first["sha256"] != second["sha256"]
    one = client.get(f"/api/v1/images/{first['id']}/file").content
    two = client.get(f"/api/v1/images/{second['id']}/file").content
    assert one != two


def test_clip_replay_returns_the_same_job_and_charges_once(client: httpx.Client) -> None:
    body = job_body(kind="clip", task_id="clip-task")
    first = submit(client, body, key="clip-key-1")
    again = submit(client, body, key="clip-key-1")
    assert first.status_code == again.status_code == 202
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert charges(client) == {"charges": {"clip-task": 1}, "total": 1}

    clip = client.get(f"{JOBS}/{first.json()['id']}").json()["result"]["image"]
    assert clip["mime"] == "image/webp"
    data = client.get(f"/api/v1/images/{clip['id']}/file").content
    animation = Image.open(io.BytesIO(data))
    assert animation.format == "WEBP"
    assert 4 <= animation.n_frames <= 6


def test_clip_without_idempotency_key_is_refused(client: httpx.Client) -> None:
    assert_error(submit(client, job_body(kind="clip")), 400)
    assert charges(client)["total"] == 0


def test_image_submits_are_never_deduplicated(client: httpx.Client) -> None:
    body = job_body(task_id="image-task")
    first = submit(client, body, key="same-key")
    second = submit(client, body, key="same-key")
    assert first.json()["id"] != second.json()["id"]
    assert "idempotent-replayed" not in second.headers
    assert charges(client) == {"charges": {"image-task": 2}, "total": 2}


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b"[1, 2]", b"\xff\xfe", b"[" * 100_000],
    ids=["broken", "empty", "array", "not-utf8", "deep"],
)
def test_malformed_json_gets_400_in_the_error_shape(client: httpx.Client, content: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    assert_error(client.post(JOBS, content=content, headers=headers), 400)
    assert charges(client)["total"] == 0


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "video"},
        {"provider": ""},
        {"prompt": None},
        {"model": 3},
        {"references": "none"},
        {"source_metadata": {"source_app": APP}},
    ],
)
def test_invalid_submit_bodies_get_400(client: httpx.Client, change: dict[str, Any]) -> None:
    assert_error(submit(client, {**job_body(), **change}), 400)


def test_unknown_routes_jobs_and_methods(client: httpx.Client) -> None:
    assert_error(client.get("/api/v1/nothing"), 404)
    assert_error(client.get(f"{JOBS}/job_unknown"), 404)
    assert_error(client.get("/api/v1/images/img_unknown/file"), 404)
    refused = assert_error(client.delete(JOBS), 405)
    assert refused["code"] == "method_not_allowed"
    assert_error(client.get("/_sim/nothing"), 404)


def test_dropped_connection_after_accept_still_created_and_charged(client: httpx.Client) -> None:
    configure(client, drop_after_accept=1)
    with pytest.raises(httpx.RemoteProtocolError):
        submit(client, job_body(task_id="dropped"))
    assert charges(client) == {"charges": {"dropped": 1}, "total": 1}
    jobs = client.get("/_sim/jobs").json()["items"]
    assert [job["task_id"] for job in jobs] == ["dropped"]
    assert jobs[0]["status"] == "succeeded"
    # The knob is spent: the next submit is answered normally.
    assert submit(client, job_body(task_id="dropped")).status_code == 202


def test_dropped_clip_resent_under_the_same_key_is_replayed(client: httpx.Client) -> None:
    configure(client, drop_after_accept=1)
    body = job_body(kind="clip", task_id="clip-drop")
    with pytest.raises(httpx.RemoteProtocolError):
        submit(client, body, key="k-1")
    again = submit(client, body, key="k-1")
    assert again.headers["idempotent-replayed"] == "true"
    assert charges(client)["total"] == 1


def test_busy_answers_retry_after_without_a_job_or_charge(client: httpx.Client) -> None:
    configure(client, busy={"count": 2, "status": 429, "retry_after": 7})
    for _ in range(2):
        answer = submit(client, job_body())
        assert_error(answer, 429)
        assert answer.headers["retry-after"] == "7"
    assert charges(client)["total"] == 0
    assert client.get("/_sim/jobs").json()["items"] == []
    assert submit(client, job_body()).status_code == 202

    configure(client, busy={"count": 1, "status": 503})
    assert_error(submit(client, job_body()), 503)


def test_failed_history_write_then_repair(client: httpx.Client) -> None:
    configure(client, fail_history_writes=True)
    job = finished(client, job_body(task_id="hist-task"))
    assert job["status"] == "succeeded"
    assert job["result"]["history"] is None
    assert job["result"]["history_error"] == "Ember could not write the history row (simulated)."
    search = {"source_app": APP, "task_id": "hist-task"}
    assert client.get("/api/v1/history", params=search).json() == {"items": []}

    repaired = client.post("/_sim/history/repair", json={"task_id": "hist-task"}).json()
    assert repaired == {"repaired": [job["id"]]}
    items = client.get("/api/v1/history", params=search).json()["items"]
    assert len(items) == 1
    row = items[0]
    assert row["id"].startswith("hist_")
    assert row["job_id"] == job["id"]
    assert row["image_id"] == job["result"]["image"]["id"]
    assert row["source_metadata"]["task_id"] == "hist-task"
    assert row["result"]["history"] == {"id": row["id"]}
    again = client.get(f"{JOBS}/{job['id']}").json()["result"]
    assert again["history"] == {"id": row["id"]}
    assert again["history_error"] is None


def test_history_lists_only_the_asked_task(client: httpx.Client) -> None:
    mine = finished(client, job_body(task_id="mine"))
    finished(client, job_body(task_id="other"))
    items = client.get("/api/v1/history", params={"source_app": APP, "task_id": "mine"}).json()
    assert [row["job_id"] for row in items["items"]] == [mine["id"]]
    assert_error(client.get("/api/v1/history"), 400)


def test_history_finishes_due_jobs_lazily(client: httpx.Client) -> None:
    job_id = submit(client, job_body(task_id="lazy")).json()["id"]
    items = client.get("/api/v1/history", params={"source_app": APP, "task_id": "lazy"}).json()
    assert [row["job_id"] for row in items["items"]] == [job_id]


def test_cleanup_removes_only_unprotected_images(client: httpx.Client) -> None:
    kept = finished(client, job_body(candidate=1))["result"]["image"]
    released = finished(client, job_body(candidate=2))["result"]["image"]
    other_app = finished(client, job_body(candidate=3, source_app="otherApp"))["result"]["image"]
    patch = {"protected": False, "durable_copy": True}
    for image_id in (released["id"], other_app["id"]):
        answer = client.patch(f"/api/v1/explorations/{image_id}/protection", json=patch)
        assert answer.status_code == 200
        assert answer.json() == {"id": image_id, "protected": False}

    removed = client.post("/_sim/cleanup", json={"source_app": APP}).json()
    assert removed == {"removed": [released["id"]]}
    assert client.get(f"/api/v1/images/{kept['id']}/file").status_code == 200
    assert_error(client.get(f"/api/v1/images/{released['id']}/file"), 404)
    assert client.get(f"/api/v1/images/{other_app['id']}/file").status_code == 200
    images = {image["id"]: image for image in client.get("/_sim/images").json()["items"]}
    assert images[kept["id"]]["protected"] is True
    assert images[released["id"]]["removed"] is True
    assert images[other_app["id"]]["removed"] is False


def test_release_validates_body_and_image(client: httpx.Client) -> None:
    image = finished(client, job_body())["result"]["image"]
    path = f"/api/v1/explorations/{image['id']}/protection"
    assert_error(client.patch(path, json={"protected": True}), 400)
    assert_error(client.patch(path, content=b"nope"), 400)
    patch = {"protected": False, "durable_copy": True}
    assert_error(client.patch("/api/v1/explorations/img_unknown/protection", json=patch), 404)


def test_non_exploration_results_are_not_protected(client: httpx.Client) -> None:
    image = finished(client, job_body(purpose="final"))["result"]["image"]
    assert client.post("/_sim/cleanup", json={"source_app": APP}).json() == {
        "removed": [image["id"]]
    }


def test_non_image_bytes(client: httpx.Client) -> None:
    image = finished(client, job_body())["result"]["image"]
    configure(client, non_image_bytes=True)
    file = client.get(f"/api/v1/images/{image['id']}/file")
    assert file.status_code == 200
    assert file.headers["content-type"] == "image/png"
    assert file.content == b"<html>not an image</html>"
    assert hashlib.sha256(file.content).hexdigest() != image["sha256"]


def test_fail_jobs(client: httpx.Client) -> None:
    configure(client, fail_jobs=1)
    failed = finished(client, job_body(task_id="refused"))
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "code": "content_policy",
        "message": "The prompt was refused by the provider (simulated).",
    }
    assert "result" not in failed
    assert charges(client)["charges"] == {"refused": 1}
    assert finished(client, job_body())["status"] == "succeeded"


def test_latency_and_slow_download(client: httpx.Client) -> None:
    image = finished(client, job_body())["result"]["image"]
    configure(client, latency={"poll": 0.3}, slow_download_seconds=0.3)
    started = time.monotonic()
    client.get(f"{JOBS}/nope")
    client.get(f"/api/v1/images/{image['id']}/file")
    assert time.monotonic() - started >= 0.6


def test_config_round_trip_and_validation(client: httpx.Client) -> None:
    config = configure(client, latency={"submit": 0.5}, busy={"count": 1})
    assert config["latency"]["submit"] == 0.5
    assert config["latency"]["poll"] == 0.0
    assert config["busy"] == {"count": 1, "status": 429, "retry_after": 1.0}
    assert client.get("/_sim/config").json() == config
    assert_error(client.post("/_sim/config", json={"nonsense": 1}), 400)
    assert_error(client.post("/_sim/config", json={"fail_jobs": -1}), 400)
    assert_error(client.post("/_sim/config", json={"busy": {"status": 500}}), 400)
    assert_error(client.post("/_sim/config", content=b"{"), 400)
    assert client.get("/_sim/config").json() == config


def test_synchronous_door_answers_201_and_charges(client: httpx.Client) -> None:
    answer = client.post("/api/v1/api-generators/generate", json=job_body(task_id="sync"))
    assert answer.status_code == 201
    body = answer.json()
    assert body["id"].startswith("job_")
    assert body["status"] == "succeeded"
    assert body["result"]["image"]["mime"] == "image/png"
    assert charges(client) == {"charges": {"sync": 1}, "total": 1}


def test_request_log_records_every_ember_request(client: httpx.Client) -> None:
    job = finished(client, job_body())
    image = job["result"]["image"]
    client.get(f"/api/v1/images/{image['id']}/file")
    client.patch(
        f"/api/v1/explorations/{image['id']}/protection",
        json={"protected": False, "durable_copy": True},
    )
    client.get("/api/v1/history", params={"source_app": APP, "task_id": "task-1"})
    client.get("/_sim/jobs")
    log = client.get("/_sim/requests").json()["items"]
    assert [(item["method"], item["path"], item["status"]) for item in log] == [
        ("POST", JOBS, 202),
        ("GET", f"{JOBS}/{job['id']}", 200),
        ("GET", f"/api/v1/images/{image['id']}/file", 200),
        ("PATCH", f"/api/v1/explorations/{image['id']}/protection", 200),
        ("GET", "/api/v1/history", 200),
    ]
    assert log[-1]["query"] == f"source_app={APP}&task_id=task-1"
    assert all(item["time"] for item in log)
    assert not any(item["path"].endswith("/generate") for item in log)


def test_reset_forgets_everything(client: httpx.Client) -> None:
    finished(client, job_body())
    configure(client, fail_jobs=3)
    assert client.post("/_sim/reset").json() == {"reset": True}
    assert charges(client) == {"charges": {}, "total": 0}
    assert client.get("/_sim/jobs").json() == {"items": []}
    assert client.get("/_sim/images").json() == {"items": []}
    assert client.get("/_sim/requests").json() == {"items": []}
    assert client.get("/_sim/config").json()["fail_jobs"] == 0
    assert client.get("/_sim/config").json()["job_seconds"] == 0.0


def test_keep_alive_connection_survives_errors(client: httpx.Client) -> None:
    assert_error(client.post(JOBS, content=b"{bad"), 400)
    assert_error(client.get("/nowhere"), 404)
    assert submit(client, job_body()).status_code == 202


def test_it_remembers_jobs_images_and_charges_across_a_restart_with_a_state_file(tmp_path):
    state_file = tmp_path / "sim.state"
    first = Simulator(port=0, job_seconds=0, state_file=state_file).start()
    headers = {"Authorization": "Bearer dev-token"}
    body = {
        "kind": "image",
        "provider": "openai",
        "model": None,
        "prompt": "p",
        "frame": "image",
        "references": [],
        "source_metadata": {
            "source_app": "cwkAvatars",
            "purpose": "exploration",
            "task_id": "t-1",
            "candidate": 1,
        },
    }
    job_id = httpx.post(
        f"{first.url}/api/v1/api-generators/jobs", json=body, headers=headers
    ).json()["id"]
    clip = {**body, "kind": "clip", "frame": "clip"}
    clip_headers = {**headers, "Idempotency-Key": "clip-key-1"}
    clip_id = httpx.post(
        f"{first.url}/api/v1/api-generators/jobs", json=clip, headers=clip_headers
    ).json()["id"]
    job = httpx.get(f"{first.url}/api/v1/api-generators/jobs/{job_id}", headers=headers).json()
    image_url = f"{first.url}/api/v1/images/{job['result']['image']['id']}/file"
    original = httpx.get(image_url, headers=headers).content
    first.stop()
    # The state is plain JSON (never pickle: loading it runs nothing).
    assert set(json.loads(state_file.read_text())) >= {"jobs", "images", "charges"}

    second = Simulator(port=0, job_seconds=0, state_file=state_file).start()
    try:
        job = httpx.get(f"{second.url}/api/v1/api-generators/jobs/{job_id}", headers=headers).json()
        assert job["status"] == "succeeded"
        assert httpx.get(image_url.replace(first.url, second.url), headers=headers).content == (
            original
        )
        replay = httpx.post(
            f"{second.url}/api/v1/api-generators/jobs", json=clip, headers=clip_headers
        )
        assert replay.json()["id"] == clip_id
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert httpx.get(f"{second.url}/_sim/charges").json()["charges"] == {"t-1": 2}
    finally:
        second.stop()


def test_a_state_file_that_is_not_json_is_refused_not_run(tmp_path):
    state_file = tmp_path / "sim.state"
    marker = tmp_path / "ran"
    state_file.write_bytes(pickle.dumps(_Touch(str(marker))))

    with pytest.raises(ValueError):
        Simulator(port=0, job_seconds=0, state_file=state_file)

    assert not marker.exists()


class _Touch:
    """A pickle that would create a file if it were ever unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_it_runs_without_django():
    """bench runs the simulator in a process with no settings and no data dir at all."""
    probe = (
        "import sys, studio.ember.simulator\nprint(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=root, check=True
    )

    assert "django" not in done.stdout and "PIL" in done.stdout, done.stdout
