"""A copy whose image Ember no longer has, while the archive already holds its bytes.

Found by a review of backups: a backup taken while the worker ran held a task `copying`
whose original the lost install saved and Ember released (and then deleted) during the
backup. Restored, that task failed "Ember says it no longer has this image" although
the operator held the very bytes, hashing to Ember's own claim; put into the archive by
hand, they were still not taken: the worker asked Ember only.
"""

import hashlib
import os

import httpx
import pytest

from studio import engine, originals
from studio.models import Asset, TaskState
from studio.phrases import GONE_PHASE
from studio.store import update
from studio.worker import Worker
from tests.factories import drain, plan, png_bytes
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

GONE = httpx.Response(404, json={"error": {"code": "not_found", "message": "No such image."}})


def quick(worker: Worker) -> Worker:
    return Worker(client=worker.client, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0)


def gone_from_ember(subject, ember, worker):
    """A task whose job Ember finished, and whose image it no longer has: copy_failed."""
    fake = FakeEmber(ember)
    fake.file_route.mock(return_value=GONE)
    [task] = plan(subject)
    drain(quick(worker))
    task.refresh_from_db()
    assert (task.state, task.phase) == (TaskState.COPY_FAILED, GONE_PHASE)
    return fake, task


def test_a_reconcile_takes_the_bytes_an_operator_put_back_in_the_archive(subject, ember, worker):
    fake, task = gone_from_ember(subject, ember, worker)
    fake.release_route.mock(return_value=GONE)  # Ember let go of it, and removed it since
    image = task.saved("image")
    placed = originals.save(fake.images[image["id"]])  # as an operator would, from a backup
    assert placed.sha256 == image["sha256"]
    fetches = fake.file_route.call_count

    engine.reconcile(task=task, client=worker.client)
    drain(quick(worker))

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.phase, task.error)
    asset = Asset.objects.get(task=task)
    assert (asset.sha256, asset.ember_image_id) == (image["sha256"], image["id"])
    assert originals.read(asset.sha256, asset.mime) == fake.images[image["id"]]
    # Ember was asked for the image, then asked to let go of it (404), which its file
    # route confirmed (404 again): released, not "unconfirmed" for good (a re-review).
    assert fake.file_route.call_count == fetches + 2
    assert len(fake.submits) == 1  # nothing paid again
    assert fake.release_route.call_count == 1
    assert task.protection_released is True


def test_bytes_taken_from_the_archive_are_released_only_once_ember_says_so(subject, ember, worker):
    """Found by a review: one 404 from the file route, for an image Ember still held, was
    taken for "released" with no release asked; Ember kept its copy protected for good."""
    fake, task = gone_from_ember(subject, ember, worker)
    image = task.saved("image")
    originals.save(fake.images[image["id"]])

    engine.reconcile(task=task, client=worker.client)
    drain(quick(worker))

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.phase, task.error)
    assert fake.release_route.call_count == 1  # the release asked, and answered 200
    assert fake.release_route.calls.last.request.url.path.split("/")[4] == image["id"]
    assert task.protection_released is True


def test_bytes_in_the_archive_that_do_not_hash_to_ember_s_claim_are_not_taken(
    subject, ember, worker
):
    fake, task = gone_from_ember(subject, ember, worker)
    image = task.saved("image")
    path = originals.path_of(image["sha256"], image["mime"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not the image Ember made")

    engine.reconcile(task=task, client=worker.client)
    drain(quick(worker))

    task.refresh_from_db()
    assert (task.state, task.phase) == (TaskState.COPY_FAILED, GONE_PHASE)
    assert not Asset.objects.filter(task=task).exists()
    assert fake.release_route.call_count == 0
    assert path.read_bytes() == b"not the image Ember made"  # left for a person to look at


def test_it_finds_the_bytes_under_their_own_type_when_ember_named_another(subject, ember, worker):
    _fake, task = gone_from_ember(subject, ember, worker)
    image = task.saved("image")
    jpeg = png_bytes(3, fmt="JPEG")
    sha256 = hashlib.sha256(jpeg).hexdigest()
    task.result["image"].update(sha256=sha256, mime="image/png")  # Ember's word: a PNG
    update(task, result=task.result)
    originals.save(jpeg)  # the archive names it by what it is: .jpg

    engine.reconcile(task=task, client=worker.client)
    drain(quick(worker))

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.phase, task.error)
    asset = Asset.objects.get(task=task)
    assert (asset.sha256, asset.mime, asset.ember_image_id) == (sha256, "image/jpeg", image["id"])


def test_bytes_a_person_put_in_the_archive_are_on_the_disk_before_ember_lets_go(
    subject, ember, worker, monkeypatch
):
    """Found by a review: a file put there by hand (`cp`, not flushed) was hashed and its
    folder fsynced, never the file, and then Ember was told to let go of its copy."""
    fake, task = gone_from_ember(subject, ember, worker)
    image = task.saved("image")
    path = originals.path_of(image["sha256"], image["mime"])
    path.write_bytes(fake.images[image["id"]])  # as `cp` leaves it: in the page cache
    events: list[str] = []
    real_fsync = os.fsync

    def noted(fd: int) -> None:
        if os.fstat(fd).st_ino == path.stat().st_ino:
            events.append("the file flushed")
        real_fsync(fd)

    def released(_request: httpx.Request, **_route: str) -> httpx.Response:
        events.append("Ember let go")
        return httpx.Response(200, json={"protected": False})

    monkeypatch.setattr(os, "fsync", noted)
    fake.release_route.mock(side_effect=released)

    engine.reconcile(task=task, client=worker.client)
    drain(quick(worker))

    task.refresh_from_db()
    assert task.state == TaskState.DONE, (task.phase, task.error)
    assert task.protection_released is True
    assert events[:2] == ["the file flushed", "Ember let go"], events
