"""The Ember simulator as a process: its state file across restarts, and no Django."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from studio.ember.simulator import Simulator
from tests.simulator.calls import JOBS, job_body


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


def test_an_image_file_removed_from_beside_the_state_file_is_an_image_whose_bytes_are_gone(
    tmp_path,
):
    state_file = tmp_path / "sim.state"
    first = Simulator(port=0, job_seconds=0, state_file=state_file).start()
    headers = {"Authorization": "Bearer dev-token"}
    jobs = f"{first.url}{JOBS}"
    job_id = httpx.post(jobs, json=job_body(task_id="t-1"), headers=headers).json()["id"]
    image_id = httpx.get(f"{jobs}/{job_id}", headers=headers).json()["result"]["image"]["id"]
    first.stop()
    (tmp_path / "sim.state.images" / f"{image_id}.bin").unlink()  # by hand

    second = Simulator(port=0, job_seconds=0, state_file=state_file).start()
    try:
        fetched = httpx.get(f"{second.url}/api/v1/images/{image_id}/file", headers=headers)
        polled = httpx.get(f"{jobs.replace(first.url, second.url)}/{job_id}", headers=headers)
    finally:
        second.stop()

    assert fetched.status_code == 404, fetched.text
    assert polled.json()["status"] == "succeeded"
