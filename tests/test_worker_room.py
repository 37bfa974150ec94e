"""Nothing is paid for that the archive could not keep (found by a review: with the archive's
disk full, the worker paid for 48 of 48 new jobs, each then `copy_failed`)."""

import errno
import os
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from studio import originals
from studio.models import TaskState
from studio.worker import room
from tests.factories import plan
from tests.fake_ember import FakeEmber
from tests.worker_drive import drive_once

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024


def a_disk(*, free: int, read_only: bool = False, files: int = -1) -> os.statvfs_result:
    """A disk with `free` bytes; `files` left of 10**6 (-1: a disk that counts none)."""
    flag = os.ST_RDONLY if read_only else 0
    total, left = (0, 0) if files < 0 else (10**6, files)
    # bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax
    return os.statvfs_result(
        (4096, 4096, 10**6, free // 4096, free // 4096, total, left, left, flag, 255)
    )


@pytest.mark.parametrize(
    ("disk", "why"),
    [
        (a_disk(free=10 * MB), "10.0 MB free on its disk, less than one image may take (25.0 MB)"),
        (a_disk(free=10**4 * MB, read_only=True), "its disk is read-only"),
        # Space left but no file to put it in: ENOSPC all the same (a disk of small files).
        (
            a_disk(free=10**4 * MB, files=3),
            "3 files left on its disk, fewer than a copy may make (8)",
        ),
    ],
    ids=["full", "read-only", "no files left"],
)
def test_a_task_waits_unsent_while_the_archive_could_not_keep_its_image(
    subject, ember, worker, monkeypatch, settings, disk, why
):
    settings.AVATARS_MAX_IMAGE_BYTES = 25 * MB
    fake = FakeEmber(ember)
    [task] = plan(subject)
    monkeypatch.setattr(room.os, "statvfs", lambda _path: disk)

    task = drive_once(worker, task)

    assert fake.submit_route.call_count == 0, "paid for an image the archive could not keep"
    assert task.state == TaskState.QUEUED and task.attempts.count() == 0
    assert task.phase == (f"Not sent: the archive could not keep the image ({why}); will try again")
    assert task.next_attempt_at > timezone.now() + timedelta(seconds=25)

    monkeypatch.undo()  # room again
    task = drive_once(worker, task.__class__.objects.get(pk=task.pk))
    assert fake.submit_route.call_count == 1


def test_the_archive_not_made_yet_is_looked_at_on_its_disk(settings, tmp_path):
    settings.AVATARS_DATA_DIR = tmp_path / "new"  # no originals/ (nor data dir) yet

    assert room.archive_refuses() == ""


def test_a_disk_with_files_to_spare_or_none_counted_takes_the_image(monkeypatch, settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 25 * MB
    for disk in (a_disk(free=10**4 * MB, files=room.FILES_A_COPY), a_disk(free=10**4 * MB)):
        monkeypatch.setattr(room.os, "statvfs", lambda _path, disk=disk: disk)
        assert room.archive_refuses() == "", disk


def failing_fsync(fd: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_after_a_copy_the_disk_refused_nothing_is_sent_until_a_write_goes_through(
    subject, ember, worker, monkeypatch
):
    """With room judged by `statvfs` alone, a disk that fails its writes (an I/O error, a
    quota) would have every new job paid for and then left `copy_failed`."""
    fake = FakeEmber(ember)
    first, second = plan(subject, candidates=2)
    monkeypatch.setattr(originals.os, "fsync", failing_fsync)  # the disk fails every write

    first = drive_once(worker, first)
    assert first.state == TaskState.COPY_FAILED, first.phase
    second = drive_once(worker, second)

    assert fake.submit_route.call_count == 1, "paid for a job the failing archive could not keep"
    assert second.state == TaskState.QUEUED and second.attempts.count() == 0
    assert second.phase == (
        "Not sent: the archive could not keep the image "
        "(its last write failed: Input/output error); will try again"
    )
    assert not list(originals.originals_dir().rglob("*.tmp")), "the looks left files behind"

    monkeypatch.undo()  # the disk writes again: the next look's small write goes through
    second.next_attempt_at = None
    second = drive_once(worker, second)
    assert fake.submit_route.call_count == 2
    assert second.state == TaskState.DONE, second.phase


def over_quota(*args: object) -> None:
    raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))


def test_a_quota_that_takes_a_small_file_but_not_an_image_holds_sends_back(
    subject, ember, worker, monkeypatch
):
    """Found by a review of the first version: its look wrote 4 bytes, which a quota with 1 MB
    left takes, and every send after it was paid for until the next copy failed. The look
    now reserves one image of the largest accepted size."""
    fake = FakeEmber(ember)
    first, second = plan(subject, candidates=2)
    monkeypatch.setattr(originals, "save", over_quota)  # an image's write: refused
    monkeypatch.setattr(room.os, "posix_fallocate", over_quota)  # so is an image's size

    first = drive_once(worker, first)
    second = drive_once(worker, second)

    assert first.state == TaskState.COPY_FAILED, first.phase
    assert fake.submit_route.call_count == 1, "paid for a job the quota could not keep"
    assert "(its last write failed: Disk quota exceeded)" in second.phase, second.phase
    assert not list(originals.originals_dir().rglob("*.tmp")), "the looks left files behind"


def test_a_copy_that_fails_while_a_look_reserves_is_not_forgotten(monkeypatch):
    """Found by a review: the look ran on the loop while copies fail in threads of their own,
    and a look that went through cleared a failure noted meanwhile."""
    seen = room.Room()
    with pytest.raises(OSError):
        seen.keep(over_quota)

    def reserve_while_a_copy_fails() -> str:
        with pytest.raises(OSError):
            seen.keep(failing_fsync, 3)  # another slot's copy, meanwhile
        return ""  # the look's own reserve went through

    monkeypatch.setattr(room, "archive_refuses", lambda: "")
    monkeypatch.setattr(room, "_reserve", reserve_while_a_copy_fails)

    assert async_to_sync(seen.refuses)() == "its last write failed: Input/output error"
    assert seen.failed == "its last write failed: Input/output error"

    monkeypatch.setattr(room, "_reserve", lambda: "")
    assert async_to_sync(seen.refuses)() == ""
    assert seen.failed == ""
