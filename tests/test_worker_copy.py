"""The worker finishing a task: copy first, release last (docs/design.md §6.7)."""

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connections

from studio import engine, originals
from studio.models import Asset, Task, TaskState
from studio.phrases import GONE_PHASE
from studio.worker import (
    Worker,
)
from tests.factories import drain, plan, png_bytes
from tests.fake_ember import FakeEmber, flood

pytestmark = pytest.mark.django_db


def originals_on_disk() -> set[str]:
    folder = Path(settings.AVATARS_DATA_DIR) / "originals"
    return {p.name for p in folder.iterdir()}


# --- finish: copy first, release last -------------------------------------------------


def committed_assets(sha: str, task_id) -> int:
    """Count the asset rows another connection can see: only committed ones."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM studio_asset WHERE sha256 = %s AND task_id = %s",
                [sha, task_id.hex if other.vendor == "sqlite" else task_id],
            )
            return cursor.fetchone()[0]
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_it_has_the_original_on_disk_and_its_row_committed_before_releasing(subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    seen = {}

    def release(request, image_id):
        sha = fake.jobs["job_1"]["result"]["image"]["sha256"]
        seen["on_disk"] = originals.path_for(sha, ".png").is_file()
        # Another connection sees only committed rows (opened off the event loop's thread).
        with ThreadPoolExecutor(1) as pool:
            seen["rows"] = pool.submit(committed_assets, sha, task.pk).result()
        return httpx.Response(200, json={"protected": False})

    fake.release_route.mock(side_effect=release)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert seen == {"on_disk": True, "rows": 1}


@pytest.mark.parametrize(
    "failure", [httpx.Response(500), httpx.ConnectError("gone"), httpx.ReadTimeout("slow")]
)
@pytest.mark.parametrize("history", [True, False])
def test_it_finishes_with_protection_unconfirmed_when_the_release_fails(
    subject, ember, worker, failure, history
):
    fake = FakeEmber(ember, history=history)
    route = fake.release_route
    route.mock(side_effect=failure) if isinstance(failure, Exception) else route.mock(
        return_value=failure
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == (TaskState.DONE if history else TaskState.HISTORY_MISSING)
    assert task.protection_released is False
    assert Asset.objects.filter(task=task).exists()
    assert route.call_count == 1  # nothing retries a failed release on a timer


GONE = {"error": {"code": "not_found", "message": "no such image"}}


@pytest.mark.parametrize(("file_after", "released"), [(404, True), (200, False)])
def test_a_release_answered_404_counts_as_let_go_of_only_once_the_image_is_gone(
    subject, ember, worker, file_after, released
):
    """Found by a kill review: a worker stopped after Ember applied the release sent it
    again on restart; Ember had removed the image and answered 404, and the task kept
    "release unconfirmed" for good ("Ask Ember again" could only get 404 again). A 404 to
    the release is believed only when Ember's file route says 404 too."""
    fake = FakeEmber(ember)

    def already_let_go(request, image_id):
        if file_after == 404:  # Ember's retention removed it once it was let go of
            fake.file_route.mock(return_value=httpx.Response(404, json=GONE))
        return httpx.Response(404, json=GONE)

    fake.release_route.mock(side_effect=already_let_go)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert (task.state, task.protection_released) == (TaskState.DONE, released)
    assert fake.release_route.call_count == 1


def test_it_records_history_missing_with_embers_message(subject, ember, worker):
    FakeEmber(ember, history=False)
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING
    assert task.phase == "Original saved; history needs repair"
    assert task.error == "history write failed"


def test_it_fetches_the_image_once_across_two_finishes(subject, ember, worker):
    fake = FakeEmber(ember, history=False)
    [task] = plan(subject)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.HISTORY_MISSING

    fake.repair_history()
    engine.reconcile(task=task, client=worker.client)
    task.refresh_from_db()
    assert task.state == TaskState.COPYING
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert Asset.objects.get(task=task).ember_history_id == "hist_job_1"
    assert fake.file_route.call_count == 1
    assert len(fake.submits) == 1


@pytest.mark.parametrize("bad", ["not an image", "wrong sha256"])
def test_it_ends_copy_failed_on_bad_bytes_and_saves_and_releases_nothing(
    subject, ember, worker, bad
):
    fake = FakeEmber(ember)
    [broken, healthy] = plan(subject, candidates=2)
    before = originals_on_disk()

    def file(request, image_id):
        data = fake.images[image_id]
        if image_id == "img_1":
            data = b"<html>oops</html>" if bad == "not an image" else data + b"!"
            if bad == "not an image":
                # Ember's sha256 matches these bytes: only the image check can catch them.
                fake.jobs["job_1"]["result"]["image"]["sha256"] = hashlib.sha256(data).hexdigest()
        return httpx.Response(200, content=data, headers={"Content-Type": "image/png"})

    fake.file_route.mock(side_effect=file)
    # The first task's job must be job_1: plan order is ordinal order.
    drain(Worker(client=worker.client, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0))

    broken.refresh_from_db()
    healthy.refresh_from_db()
    assert broken.state == TaskState.COPY_FAILED
    assert broken.error
    assert broken.result is not None  # the saved answer stays for a later reconcile
    assert not Asset.objects.filter(task=broken).exists()
    released = [c.request.url.path for c in fake.release_route.calls]
    assert "/api/v1/explorations/img_1/protection" not in released
    assert healthy.state == TaskState.DONE  # the pump kept going
    assert len(originals_on_disk() - before) == 1


def test_it_copies_a_copy_failed_task_after_reconcile_without_generating_again(
    subject, ember, worker
):
    fake = FakeEmber(ember)
    fake.file_route.mock(return_value=httpx.Response(503))
    [task] = plan(subject)
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED

    fake.file_route.mock(side_effect=fake._file)
    engine.reconcile(task=task, client=worker.client)
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert len(fake.submits) == 1


def remove_each_original_as_its_row_is_written(monkeypatch) -> None:
    """Take each original away right after its asset row is written, as a racing removal would."""
    from studio.worker import steps

    real = steps.record_asset

    def record_then_lose(task, original):
        asset = real(task, original)
        original.path.unlink()
        return asset

    monkeypatch.setattr(steps, "record_asset", record_then_lose)


def test_it_copies_an_original_again_that_went_missing_before_releasing_it(
    subject, ember, worker, monkeypatch
):
    """Found by a review: the release went out while Avatars no longer held the bytes."""
    fake = FakeEmber(ember)
    [task] = plan(subject)
    remove_each_original_as_its_row_is_written(monkeypatch)
    on_disk_at_release = []

    def release(request, image_id):
        sha = fake.jobs["job_1"]["result"]["image"]["sha256"]
        on_disk_at_release.append(originals.path_for(sha, ".png").is_file())
        return httpx.Response(200, json={"protected": False})

    fake.release_route.mock(side_effect=release)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.file_route.call_count == 2  # fetched again once the file was found gone
    assert on_disk_at_release == [True]
    assert task.protection_released is True
    asset = Asset.objects.get(task=task)
    assert originals.read(asset.sha256, asset.mime)  # there, and matching its hash


def test_it_releases_nothing_when_a_missing_original_cannot_be_copied_again(
    subject, ember, worker, monkeypatch
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    remove_each_original_as_its_row_is_written(monkeypatch)
    fetched = iter([True])

    def file(request, image_id):
        if next(fetched, False):
            return fake._file(request, image_id)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "gone"}})

    fake.file_route.mock(side_effect=file)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert task.phase == GONE_PHASE
    assert fake.release_route.call_count == 0  # Ember keeps its protected copy
    assert task.protection_released is None


@pytest.mark.parametrize(
    ("answer", "phase", "fetches"),
    [
        (404, GONE_PHASE, 1),  # gone: asking again gets the same answer
        (503, "The copy from Ember failed; reconcile to retry", 8),  # Ember away: waited
    ],
)
def test_it_says_when_ember_no_longer_has_the_image_and_a_reconcile_cannot_copy_it(
    subject, ember, worker, answer, phase, fetches
):
    """Noticed by a review: a restored task whose image Ember's retention had removed said
    "reconcile to retry", and each reconcile ended the same way."""
    fake = FakeEmber(ember)
    fake.file_route.mock(
        return_value=httpx.Response(answer, json={"error": {"code": "x", "message": "No image."}})
    )
    [task] = plan(subject)
    quick = Worker(client=worker.client, workers=1, poll_interval=0, tick=0, fetch_retry_delay=0)
    drain(quick)
    task.refresh_from_db()
    assert (task.state, task.phase, task.error) == (TaskState.COPY_FAILED, phase, "No image.")
    assert fake.file_route.call_count == fetches

    engine.reconcile(task=task, client=worker.client)
    drain(quick)

    task.refresh_from_db()
    assert (task.state, task.phase) == (TaskState.COPY_FAILED, phase)
    assert len(fake.submits) == 1  # never made again
    assert fake.release_route.call_count == 0


def test_it_finishes_two_tasks_whose_results_have_the_same_bytes(subject, ember, worker):
    fake = FakeEmber(ember)
    fake.placeholder = png_bytes(99)  # a provider's placeholder, sent for both candidates
    sha = hashlib.sha256(fake.placeholder).hexdigest()
    tasks = plan(subject, candidates=2)
    before = originals_on_disk()

    drain(worker)

    assert {Task.objects.get(pk=t.pk).state for t in tasks} == {TaskState.DONE}
    assets = Asset.objects.filter(task__in=tasks).order_by("ember_image_id")
    assert [(a.ember_image_id, a.ember_history_id, a.sha256) for a in assets] == [
        ("img_1", "hist_1", sha),
        ("img_2", "hist_2", sha),
    ]
    assert originals_on_disk() - before == {f"{sha}.png"}  # one file, two rows
    released = sorted(c.request.url.path for c in fake.release_route.calls)
    assert released == [f"/api/v1/explorations/img_{n}/protection" for n in (1, 2)]


def test_it_finishes_a_task_whose_result_equals_a_reference_photo(subject, ember, worker):
    fake = FakeEmber(ember)
    reference = subject.assets.get()
    fake.placeholder = originals.read(reference.sha256, reference.mime)
    [task] = plan(subject)
    before = originals_on_disk()

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    generated = Asset.objects.get(task=task)
    assert generated.pk != reference.pk
    assert (generated.origin, generated.ember_image_id) == ("generated", "img_1")
    assert generated.sha256 == reference.sha256
    assert list(subject.assets.filter(origin="uploaded")) == [reference]
    assert originals_on_disk() == before


# --- an image too large to keep --------------------------------------------------------


def test_it_ends_copy_failed_at_once_when_ember_sends_an_image_over_the_cap(
    subject, ember, worker, settings
):
    settings.AVATARS_MAX_IMAGE_BYTES = cap = 256 * 1024
    chunk = 64 * 1024
    fake = FakeEmber(ember)
    taken = [0]
    fake.file_route.mock(
        side_effect=lambda request, image_id: httpx.Response(
            200, content=flood(100 * cap, taken, chunk=chunk), headers={"Content-Type": "image/png"}
        )
    )
    [task] = plan(subject)
    before = originals_on_disk()

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert task.error == originals.too_large()
    assert task.result is not None  # the saved answer stays for a later reconcile
    assert fake.file_route.call_count == 1  # Ember would send the same bytes again
    assert taken[0] <= cap + chunk, f"read {taken[0]} bytes; the cap is {cap} + {chunk}"
    assert not fake.release_route.called
    assert not Asset.objects.filter(task=task).exists()
    assert originals_on_disk() == before


def damaged_after_an_unconfirmed_release(subject, ember, worker) -> tuple[FakeEmber, Task, Path]:
    """Leave a task `history_missing` with its release unconfirmed (a 503), then damage its
    original in place and let Ember repair its history: the next finish releases again."""
    fake = FakeEmber(ember, history=False)
    [task] = plan(subject)
    fake.release_route.mock(return_value=httpx.Response(503))
    drain(worker)
    task.refresh_from_db()
    assert (task.state, task.protection_released) == (TaskState.HISTORY_MISSING, False)
    asset = Asset.objects.get(task=task)
    path = originals.path_of(asset.sha256, asset.mime)
    with path.open("r+b") as file:  # seven bytes written over in place: same name, same size
        file.seek(100)
        file.write(b"\x00" * 7)
    fake.repair_history()
    engine.reconcile(task=task, client=worker.client)
    return fake, task, path


def at_release(fake: FakeEmber, look: Callable[[], bool]) -> list[bool]:
    """Answer each release with a 200, noting what `look` saw as it arrived."""
    seen: list[bool] = []

    def release(request: httpx.Request, image_id: str) -> httpx.Response:
        seen.append(look())
        return httpx.Response(200, json={"protected": False})

    fake.release_route.mock(side_effect=release)
    return seen


def test_it_copies_a_damaged_original_again_before_releasing_it(subject, ember, worker):
    """Found by a review with its own Ember: only the file's presence was looked at, and
    the release went out while Avatars held damaged bytes."""
    fake, task, path = damaged_after_an_unconfirmed_release(subject, ember, worker)
    asset = Asset.objects.get(task=task)
    whole_at_release = at_release(
        fake, lambda: hashlib.sha256(path.read_bytes()).hexdigest() == asset.sha256
    )

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert whole_at_release == [True], "released while the original was damaged"
    assert fake.file_route.call_count == 2  # fetched again, from the asset's own image
    assert originals.read(asset.sha256, asset.mime)
    assert not path.is_symlink()


def test_it_releases_nothing_while_a_damaged_original_cannot_be_copied_again(
    subject, ember, worker
):
    fake, task, path = damaged_after_an_unconfirmed_release(subject, ember, worker)
    damaged = path.read_bytes()
    fake.release_route.reset()
    fake.file_route.mock(return_value=httpx.Response(404))

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert fake.release_route.call_count == 0  # Ember keeps its protected, whole copy
    assert path.read_bytes() == damaged  # nothing taken away: a person may want to look


def test_it_copies_an_original_that_is_only_a_link_again_before_releasing_it(
    subject, ember, worker, tmp_path
):
    """Found by a review: a later finish released Ember's copy over a link to the bytes
    on another disk; once that file went, the original was lost for good."""
    fake, task, path = damaged_after_an_unconfirmed_release(subject, ember, worker)
    asset = Asset.objects.get(task=task)
    elsewhere = tmp_path / "other-disk.png"
    elsewhere.write_bytes(fake.images[asset.ember_image_id])  # the right bytes, elsewhere
    path.unlink()
    path.symlink_to(elsewhere)
    links_at_release = at_release(fake, path.is_symlink)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert links_at_release == [False], "released while the archive held only a link"
    elsewhere.unlink()
    assert originals.read(asset.sha256, asset.mime)
