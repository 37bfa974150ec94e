"""The simulator draws a finished job's image outside its lock: drawing is what a poll costs.

With many slots the worker polls and fetches side by side; a drawing held under the
lock made every other request wait for it.
"""

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from studio.ember.simulator import Simulator, jobs
from tests.simulator.calls import JOBS, charges, configure, job_body, submit

WAIT = 5.0  # seconds any step here may take before the test gives up


def before_each_drawing(
    monkeypatch: pytest.MonkeyPatch,
    hook: Callable[[], object],
    after: Callable[[], object] = lambda: None,
) -> None:
    """Call `hook` in the drawing thread before the simulator draws each job's image, `after`
    once it is drawn."""
    draw = jobs.StoredImage.draw.__func__  # type: ignore[attr-defined]

    def hooked(cls: type[jobs.StoredImage], job: jobs.Job) -> jobs.StoredImage:
        hook()
        image = draw(cls, job)
        after()
        return image

    monkeypatch.setattr(jobs.StoredImage, "draw", classmethod(hooked))


@pytest.fixture
def held_drawing(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Make every drawing wait until released; say when one has started."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        assert release.wait(WAIT), "the test never released the drawing"

    before_each_drawing(monkeypatch, hold)
    yield started, release
    release.set()


def test_other_requests_are_answered_while_a_finished_jobs_image_is_drawn(
    client: httpx.Client, sim: Simulator, held_drawing: tuple[threading.Event, threading.Event]
) -> None:
    started, release = held_drawing
    job_id = submit(client, job_body()).json()["id"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        polled = pool.submit(client.get, f"{JOBS}/{job_id}")
        assert started.wait(WAIT), "the due job's poll never started drawing"
        # While the drawing is held: another submit and the charges are answered.
        other = submit(client, job_body(task_id="task-2"))
        assert other.status_code == 202, other.text
        assert charges(client)["total"] == 2
        release.set()
        answer = polled.result(timeout=WAIT)
    assert answer.json()["status"] == "succeeded", answer.text


def test_two_polls_that_finish_a_job_together_agree_on_one_image(
    client: httpx.Client, held_drawing: tuple[threading.Event, threading.Event]
) -> None:
    started, release = held_drawing
    job_id = submit(client, job_body()).json()["id"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = [pool.submit(client.get, f"{JOBS}/{job_id}") for _ in range(2)]
        assert started.wait(WAIT)
        release.set()
        images = {a.result(timeout=WAIT).json()["result"]["image"]["id"] for a in answers}
    assert len(images) == 1, f"one job, several images: {images}"
    fetched = client.get(f"/api/v1/images/{images.pop()}/file")
    assert fetched.status_code == 200


def test_a_jobs_image_is_drawn_while_it_runs_not_by_the_poll_that_finds_it_done(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs submitted together end together: drawing them all then delayed every answer."""
    drawn_by: list[str] = []
    drawn = threading.Event()
    before_each_drawing(
        monkeypatch, lambda: drawn_by.append(threading.current_thread().name), drawn.set
    )
    configure(client, job_seconds=0.3)
    job_id = submit(client, job_body()).json()["id"]
    assert drawn.wait(WAIT), f"no image drawn in {WAIT} s while the job ran"
    time.sleep(0.3)  # the job's time passes (drawing may take less)

    answer = client.get(f"{JOBS}/{job_id}").json()

    assert answer["status"] == "succeeded", answer
    assert len(drawn_by) == 1 and drawn_by[0].startswith("sim-draw"), drawn_by
    fetched = client.get(f"/api/v1/images/{answer['result']['image']['id']}/file")
    assert hashlib.sha256(fetched.content).hexdigest() == answer["result"]["image"]["sha256"]
