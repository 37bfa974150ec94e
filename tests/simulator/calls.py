"""Call the Ember simulator as a client does and check its answers, for its tests."""

from typing import Any

import httpx

JOBS = "/api/v1/api-generators/jobs"
APP = "cwkAvatars"


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
