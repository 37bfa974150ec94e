"""`check_originals --repair --from-backup SRC`: what a backup can put back, and what it says.

Found by a backup review: a restored task whose image Ember had released and removed
failed its copy while the operator held a later backup with its bytes, and no tool took
them; and a generated original the named backup lacked was answered "restore it from a
backup", as if none had been named.
"""

import hashlib

import pytest

from studio import originals
from studio.models import Asset, Origin, Task, TaskState
from studio.phrases import GONE_PHASE
from studio.store import move
from tests.factories import a_task, ember_result, png_bytes
from tests.scrub_parts import check, file_of, generated

pytestmark = pytest.mark.django_db

GONE = 404, {"error": {"code": "not_found", "message": "No such image."}}


def copy_gone(subject, seed: int) -> tuple[Task, bytes]:
    """A task whose copy failed because Ember no longer has its image, and that image's bytes."""
    data = png_bytes(seed)
    task = move(
        a_task(subject),
        TaskState.COPY_FAILED,
        ember_job_id=f"job_{seed}",
        result=ember_result(f"img_{seed}", f"hist_{seed}", data=data),
        phase=GONE_PHASE,
        error="No such image.",
    )
    return task, data


def a_backup_with(tmp_path, *files: bytes):
    folder = tmp_path / "backup" / "originals"
    folder.mkdir(parents=True)
    for data in files:
        (folder / f"{hashlib.sha256(data).hexdigest()}.png").write_bytes(data)
    return tmp_path / "backup"


def test_it_puts_back_the_original_of_a_task_ember_no_longer_has(subject, ember, tmp_path):
    task, data = copy_gone(subject, 9)
    backup = a_backup_with(tmp_path, data)
    name = f"{hashlib.sha256(data).hexdigest()}.png"

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 0, out
    assert not ember.calls
    assert originals.read(hashlib.sha256(data).hexdigest(), "image/png") == data
    assert (
        f"repaired: {name} (put back from the backup {backup}; reconcile task {task.pk} "
        "to finish its copy)"
    ) in out, out
    task.refresh_from_db()
    assert task.state == TaskState.COPY_FAILED  # the worker finishes it once reconciled


def test_it_says_when_the_backup_lacks_such_a_tasks_original_too(subject, ember, tmp_path):
    task, data = copy_gone(subject, 9)
    backup = a_backup_with(tmp_path)

    code, out = check("--repair", "--from-backup", str(backup))

    name = f"{hashlib.sha256(data).hexdigest()}.png"
    assert f"not copied: {name} (the original of task {task.pk}: Ember no longer has " in out
    assert (
        f"not repaired: {name} (not in the backup {backup} either: try a later backup, or the "
        "lost install's originals/)"
    ) in out, out
    assert code == 0, out  # every original a row names is whole: reconcile --all alerts


def test_a_generated_original_the_named_backup_lacks_is_not_sent_to_a_backup(ember, tmp_path):
    asset = generated(7)
    backup = a_backup_with(tmp_path)
    ember.get("/api/v1/images/img_7/file").respond(GONE[0], json=GONE[1])
    file_of(asset).unlink()

    code, out = check("--repair", "--from-backup", str(backup))

    assert code == 1
    assert (
        f"not repaired: {file_of(asset).name} (Ember no longer has image img_7; not in the "
        f"backup {backup} either: restore it from another backup)"
    ) in out, out


def test_an_original_back_in_the_archive_under_its_own_type_is_not_listed(subject):
    task, _data = copy_gone(subject, 9)
    jpeg = png_bytes(4, fmt="JPEG")
    task.result["image"].update(sha256=hashlib.sha256(jpeg).hexdigest())  # Ember said PNG
    move(task, TaskState.COPY_FAILED, result=task.result)
    originals.save(jpeg)

    code, out = check()

    assert code == 0 and "not copied" not in out, out


def test_it_finds_such_an_original_in_a_backup_under_its_own_type(subject, ember, tmp_path):
    """Found by a re-review: Ember called a PNG a JPEG; the backup names the file by what
    its bytes are, and the repair looked under Ember's word only."""
    task, data = copy_gone(subject, 9)
    task.result["image"]["mime"] = "image/jpeg"  # Ember's word; the bytes are a PNG
    move(task, TaskState.COPY_FAILED, result=task.result)
    backup = a_backup_with(tmp_path, data)  # named <sha>.png, as the store names it

    code, out = check("--repair", "--from-backup", str(backup))

    sha256 = hashlib.sha256(data).hexdigest()
    assert f"repaired: {sha256}.png (put back from the backup {backup}; reconcile task" in out
    assert originals.read(sha256, "image/png") == data
    assert code == 0, out


def test_a_tasks_lost_original_that_a_row_names_too_is_one_file_not_two(subject, ember, tmp_path):
    """Found by a review: such a file was listed (and counted) twice, as `missing` for its
    asset row and `not copied` for the task."""
    task, data = copy_gone(subject, 9)
    sha256 = hashlib.sha256(data).hexdigest()
    Asset.objects.create_stored(
        originals.save(data),
        file_name="candidate.png",
        origin=Origin.GENERATED,
        ember_image_id="img_9",
    )
    originals.path_of(sha256, "image/png").unlink()
    backup = a_backup_with(tmp_path, data)

    code, out = check("--repair", "--from-backup", str(backup))

    assert "Checked 2 originals: 1 missing; repaired 1." in out, out  # the subject's photo, and it
    assert "not copied" not in out, out
    assert f"it is also the original of task {task.pk}: Ember no longer has image img_9" in out
    assert (
        f"repaired: {sha256}.png (put back from the backup {backup}; reconcile task {task.pk} "
        "to finish its copy)"
    ) in out, out
    assert originals.read(sha256, "image/png") == data
    assert code == 0, out
