"""A repair whose archive refuses the original it puts back (full, read-only, unwritable).

Found by a review that filled the archive's disk: the repair fetched the original from
Ember and then advised "restore it from a backup", and one from a backup said the
backup's copy was "corrupt"; freeing room and running the repair again was all it took
(another made the folder immutable: the same words, a good backup called corrupt).
"""

import errno
import hashlib

import pytest

from studio import originals, scrub
from studio.models import ScrubReport, TaskState
from studio.phrases import GONE_PHASE
from studio.store import move
from tests.factories import a_task, ember_result, png_bytes
from tests.scrub_parts import a_backup_holding, check, ember_sends, file_of, generated, uploaded
from tests.sqlite_errors import sqlite_error

pytestmark = pytest.mark.django_db

REFUSED = (
    "the archive's disk refused it ({cause}): see to that disk, then run check_originals "
    "--repair again"
)


def the_archive_refuses(monkeypatch, number: int, cause: str) -> None:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise OSError(number, cause)

    monkeypatch.setattr(originals, "write_temp", refused)


@pytest.mark.parametrize(
    ("number", "cause"),
    [
        (errno.ENOSPC, "No space left on device"),
        (errno.EROFS, "Read-only file system"),
        (errno.EPERM, "Operation not permitted"),  # a review's immutable folder
    ],
)
def test_an_original_fetched_from_ember_that_the_disk_refuses_asks_for_the_disk(
    ember, monkeypatch, number, cause
):
    asset = generated(7)
    data = file_of(asset).read_bytes()
    file_of(asset).unlink()
    fetched = ember_sends(ember, data)
    the_archive_refuses(monkeypatch, number, cause)

    code, out = check("--repair")

    assert code == 1
    assert fetched.call_count == 1
    said = f"fetched from Ember, image img_7, but {REFUSED.format(cause=cause)}"
    assert f"not repaired: {file_of(asset).name} ({said})" in out, out
    assert "restore it from a backup" not in out


def test_an_upload_from_a_whole_backup_that_the_disk_refuses_does_not_blame_the_backup(
    ember, monkeypatch, tmp_path
):
    asset = uploaded(1)
    backup = a_backup_holding(tmp_path, asset)
    file_of(asset).unlink()
    the_archive_refuses(monkeypatch, errno.ENOSPC, "No space left on device")

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 1
    said = REFUSED.format(cause="No space left on device")
    assert f"not repaired: {file_of(asset).name} ({said})" in out, out
    assert "corrupt in the backup" not in out
    assert not ember.calls

    monkeypatch.undo()  # room again: the same repair puts it back
    assert check("--repair", "--from-backup", str(backup))[0] == 0
    assert originals.file_sha256(file_of(asset)) == asset.sha256


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_what_a_repair_did_is_said_when_the_database_refuses_its_record(
    ember, monkeypatch, tmp_path, how
):
    """Found by a review: only the database's sentence was printed, the repair made unsaid."""
    asset = generated(7)
    data = file_of(asset).read_bytes()
    file_of(asset).unlink()
    ember_sends(ember, data)
    refused = sqlite_error(tmp_path, how)

    def record(_result: object) -> None:
        raise refused

    monkeypatch.setattr(scrub, "record", record)

    code, out = check("--repair")

    assert code == 1, out
    assert f"repaired: {file_of(asset).name} (fetched again from Ember, image img_7)" in out
    assert "Checked 1 original: 1 missing; repaired 1." in out, out
    assert "This check was not kept for the admin's page: the database refused it (" in out
    assert originals.file_sha256(file_of(asset)) == asset.sha256
    assert not ScrubReport.objects.exists()


def test_a_generated_original_the_archive_refuses_from_a_backup_is_not_asked_of_ember(
    ember, monkeypatch, tmp_path
):
    """Found by a re-review: after the archive refused the backup's good copy, the repair
    asked Ember, and then advised "restore it from another backup"."""
    asset = generated(7)
    backup = a_backup_holding(tmp_path, asset)
    file_of(asset).unlink()
    fetched = ember_sends(ember, backup.joinpath("originals", file_of(asset).name).read_bytes())
    the_archive_refuses(monkeypatch, errno.EPERM, "Operation not permitted")

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 1
    said = REFUSED.format(cause="Operation not permitted")
    assert f"not repaired: {file_of(asset).name} ({said})" in out, out
    assert "another backup" not in out and fetched.call_count == 0


def test_a_lost_tasks_original_the_archive_refuses_from_a_backup_asks_for_the_disk_only(
    subject, ember, monkeypatch, tmp_path
):
    """The read-through's twin of the case above, for a task whose copy failed with Ember's
    image gone: the refusal was followed by ": try a later backup", which no backup helps."""
    data = png_bytes(9)
    task = move(
        a_task(subject),
        TaskState.COPY_FAILED,
        ember_job_id="job_9",
        result=ember_result("img_9", "hist_9", data=data),
        phase=GONE_PHASE,
    )
    name = f"{hashlib.sha256(data).hexdigest()}.png"
    backup = tmp_path / "backup"
    (backup / "originals").mkdir(parents=True)
    (backup / "originals" / name).write_bytes(data)
    the_archive_refuses(monkeypatch, errno.ENOSPC, "No space left on device")

    code, out = check("--repair", "--from-backup", str(backup))

    said = REFUSED.format(cause="No space left on device")
    assert f"not repaired: {name} ({said})" in out, out
    assert "later backup" not in out and f"reconcile task {task.pk}" not in out, out
    assert not ember.calls and code == 0, out
