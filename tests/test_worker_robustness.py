"""The worker outlives its hiccups, an fsync error is final, ownership cannot be bypassed."""

import os
import stat
from pathlib import Path

import pytest
from django.conf import settings

from studio import engine, originals
from studio.models import Task, TaskState
from studio.store import move
from tests.conftest import batch_request, drain
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db


def plan(subject, candidates: int = 1) -> list[Task]:
    request = batch_request(subject, providers=[{"provider": "openai", "candidates": candidates}])
    return list(engine.generate(request=request).tasks.all())


def originals_on_disk() -> set[str]:
    folder = Path(settings.AVATARS_DATA_DIR) / "originals"
    return {p.name for p in folder.iterdir()}


REAL_FSYNC = os.fsync


class BrokenFsync:
    """Stands in for os.fsync: fails every fsync of a file, or of a directory."""

    def __init__(self, broken: str) -> None:
        self.broken = broken
        self.calls: list[str] = []

    def __call__(self, fd: int) -> None:
        kind = "directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        self.calls.append(kind)
        if kind == self.broken:
            raise OSError(5, "Input/output error")
        REAL_FSYNC(fd)


# --- an fsync error is final for that copy -------------------------------------------


@pytest.mark.parametrize("broken", ["file", "directory"])
def test_it_ends_copy_failed_at_once_when_the_disk_does_not_confirm_the_copy(
    subject, ember, worker, monkeypatch, broken
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    before = originals_on_disk()
    monkeypatch.setattr(os, "fsync", BrokenFsync(broken))

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED
    assert "Input/output error" in task.error
    assert fake.file_route.call_count == 1  # no second try at a copy the disk refused
    assert fake.release_route.call_count == 0  # nothing acknowledged
    assert originals_on_disk() == before  # and no original left under its name
    assert task.result is not None  # the saved answer stays for a reconcile


@pytest.mark.parametrize("broken", ["file", "directory"])
def test_it_writes_the_original_afresh_when_a_copy_whose_fsync_failed_is_retried(
    subject, ember, worker, monkeypatch, broken
):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    monkeypatch.setattr(os, "fsync", BrokenFsync(broken))
    drain(worker)
    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED

    # A reconcile puts the task back to `copying` (as engine._back_to_copying does),
    # with the disk healthy again.
    working = BrokenFsync("nothing")
    monkeypatch.setattr(os, "fsync", working)
    move(task, TaskState.COPYING, expected=task.version, phase="Copying", error="")
    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert working.calls == ["file", "directory"]  # written again, not trusted
    sha = fake.jobs["job_1"]["result"]["image"]["sha256"]
    assert originals.path_for(sha, ".png").read_bytes() == fake.images["img_1"]
    assert fake.file_route.call_count == 2
    assert fake.release_route.call_count == 1
    assert fake.charges(str(task.pk)) == 1


def test_it_still_retries_a_fetch_that_failed_in_transit(subject, ember, worker):
    import httpx

    fake = FakeEmber(ember)
    answers = iter([httpx.Response(503)])
    fake.file_route.mock(
        side_effect=lambda request, image_id: next(answers, None) or fake._file(request, image_id)
    )
    [task] = plan(subject)

    drain(worker)

    task.refresh_from_db()
    assert task.state == TaskState.DONE
    assert fake.file_route.call_count == 2
