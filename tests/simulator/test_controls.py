"""The Ember simulator's /_sim controls: behaviours, config, request log and reset."""

import hashlib
import time

import httpx

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


def test_a_client_that_drops_its_connection_costs_one_line_not_a_traceback(sim, capsys, caplog):
    """Found by a review: a worker killed mid-request put a whole traceback into the demo's
    output. Any other error is still reported in full."""
    server = sim._server
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        with caplog.at_level("INFO", logger="studio.ember.simulator"):
            server.handle_error(None, ("127.0.0.1", 1))
    assert "Traceback" not in capsys.readouterr().err
    assert "a client dropped its connection" in caplog.text
    try:
        raise ValueError("a bug")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "Traceback" in capsys.readouterr().err
