"""The demo's Ember simulator killed (SIGKILL) finds again everything it answered about.

Ember records a job, an image, a charge or a release before it answers; the simulator
does the same with a state file (studio/ember/simulator/ledger.py), so a demo whose
processes were killed does not lose results Avatars was told about but had not copied.
"""

import hashlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import Simulator
from tests.simulator.calls import JOBS, job_body


def body(task: str, *, kind: str = "image", purpose: str = "generation") -> dict:
    return job_body(kind, task_id=task, purpose=purpose)


def ember(sim: Simulator) -> httpx.Client:
    """A client of the simulator's Ember routes (they ask for the bearer token)."""
    auth = {"Authorization": f"Bearer {sim.token}"}
    return httpx.Client(base_url=sim.url, headers=auth, timeout=30)


def killed(sim: Simulator) -> None:
    """SIGKILL the simulator at once: nothing runs after its last answer."""
    sim.http.close()
    sim.proc.send_signal(signal.SIGKILL)
    sim.proc.wait(timeout=15)


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "ember-simulator.state"


@pytest.fixture
def start(tmp_path: Path, state_file: Path) -> Iterator[Callable[[str], Simulator]]:
    """Start simulators on the one state file; stop any still running at the end."""
    running: list[Simulator] = []

    def started(name: str) -> Simulator:
        running.append(Simulator(tmp_path / name, state_file=state_file))
        return running[-1]

    yield started
    for sim in running:
        if sim.proc.poll() is None:
            sim.stop()


def test_jobs_images_charges_and_releases_answered_survive_a_sigkill(start, state_file):
    first = start("first")
    with ember(first) as api:
        kept = api.post(JOBS, json=body("t-kept", purpose="exploration")).json()["id"]
        released = api.post(JOBS, json=body("t-released", purpose="exploration")).json()["id"]
        clip = api.post(JOBS, json=body("t-clip", kind="clip"), headers={"Idempotency-Key": "k1"})
        answers = {
            job: api.get(f"{JOBS}/{job}").json()["result"]["image"] for job in (kept, released)
        }
        originals = {
            job: api.get(f"/api/v1/images/{a['id']}/file").content for job, a in answers.items()
        }
        release = api.patch(
            f"/api/v1/explorations/{answers[released]['id']}/protection",
            json={"protected": False, "durable_copy": True},
        )
        assert release.status_code == 200, release.text
    killed(first)

    second = start("second")
    try:
        with ember(second) as api:
            for job, answer in answers.items():
                again = api.get(f"{JOBS}/{job}").json()
                assert again["status"] == "succeeded", again
                assert again["result"]["image"] == answer, (job, again)
                data = api.get(f"/api/v1/images/{answer['id']}/file").content
                assert data == originals[job], f"job {job}: {len(data)} bytes back, not its own"
                assert hashlib.sha256(data).hexdigest() == answer["sha256"]
            replay = api.post(
                JOBS, json=body("t-clip", kind="clip"), headers={"Idempotency-Key": "k1"}
            )
        protected = {i["id"]: i["protected"] for i in second.get("/_sim/images")["items"]}
        assert protected[answers[kept]["id"]] is True
        assert protected[answers[released]["id"]] is False, "the release answered was forgotten"
        assert replay.json()["id"] == clip.json()["id"], "a replayed clip was charged again"
        charges = second.get("/_sim/charges")
        assert charges["charges"] == {"t-kept": 1, "t-released": 1, "t-clip": 1}, charges
    finally:
        second.stop()


def test_bytes_let_go_are_gone_from_the_state_files_folder_too(start, state_file):
    sim = start("sim")
    images = state_file.with_name(f"{state_file.name}.images")
    with ember(sim) as api:
        kept = api.post(JOBS, json=body("t-kept", purpose="exploration")).json()["id"]
        dropped = api.post(JOBS, json=body("t-dropped")).json()["id"]  # unprotected
        ids = {
            job: api.get(f"{JOBS}/{job}").json()["result"]["image"]["id"] for job in (kept, dropped)
        }
    assert sorted(p.name for p in images.iterdir()) == sorted(f"{i}.bin" for i in ids.values())

    removed = sim.post("/_sim/cleanup", {"source_app": "cwkAvatars"})["removed"]
    killed(sim)

    assert removed == [ids[dropped]], removed
    assert [p.name for p in images.iterdir()] == [f"{ids[kept]}.bin"]
    again = start("again")
    try:
        with ember(again) as api:
            assert api.get(f"/api/v1/images/{ids[dropped]}/file").status_code == 404
            assert api.get(f"/api/v1/images/{ids[kept]}/file").status_code == 200
    finally:
        again.stop()


def test_a_change_the_state_file_cannot_keep_is_answered_with_no_answer(start, state_file):
    """A change Ember could not record must not be answered as if it were (a submit read as
    refused would be paid again): the connection closes with no answer at all."""
    sim = start("sim")
    try:
        with ember(sim) as api:
            first = api.post(JOBS, json=body("t-1")).json()["id"]
            api.get(f"{JOBS}/{first}")  # its image is kept: the folder exists
            images = state_file.with_name(f"{state_file.name}.images")
            for path in images.iterdir():
                path.unlink()
            images.rmdir()
            images.write_text("a file where the folder was")  # no new image can be kept

            job = api.post(JOBS, json=body("t-2")).json()["id"]  # no new bytes: kept, answered
            with pytest.raises(httpx.RemoteProtocolError):
                api.get(f"{JOBS}/{job}")  # done now, its new image cannot be kept
        assert "could not be saved" in sim.log.read_text()
    finally:
        sim.stop()
