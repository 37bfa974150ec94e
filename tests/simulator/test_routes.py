"""The Ember simulator over real loopback HTTP: the routes docs/ember.md describes."""

import hashlib
import io
import time
from typing import Any

import httpx
import pytest
from PIL import Image

from studio.ember.simulator import Simulator
from tests.simulator.calls import (
    APP,
    JOBS,
    assert_error,
    charges,
    configure,
    finished,
    job_body,
    submit,
)


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
    # Polled often with its first sight of each status timed from before the submit: that clock
    # starts no later than the job's, so the bounds below hold however slow the machine is.
    job_seconds = 4.0
    configure(client, job_seconds=job_seconds)
    start = time.monotonic()
    job_id = submit(client, job_body()).json()["id"]
    first_seen: dict[str, float] = {}
    order: list[str] = []
    while "succeeded" not in first_seen and time.monotonic() - start < 30:
        status = client.get(f"{JOBS}/{job_id}").json()["status"]
        if status not in first_seen:
            first_seen[status] = time.monotonic() - start
            order.append(status)
        time.sleep(0.05)
    assert order == ["queued", "running", "succeeded"], f"seen {first_seen}"
    assert first_seen["running"] >= job_seconds / 2, f"running after {first_seen['running']:.2f} s"
    assert first_seen["succeeded"] >= job_seconds, f"done after {first_seen['succeeded']:.2f} s"


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
    # Removed, the image is no longer Ember's to let go of: a release is 404, as its file.
    again = client.patch(f"/api/v1/explorations/{released['id']}/protection", json=patch)
    assert_error(again, 404)


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
