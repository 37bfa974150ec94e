"""Restore: `manage.py restore SRC` into a new data dir (docs/operations.md)."""

import errno
import io
import json
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from studio import backups, engine, originals, restoring, scrub
from studio.models import Attempt, Origin, TaskState, WorkerHeartbeat
from tests.backup_parts import (
    cross_device,
    file_of,
    manifest,
    rows_in,
    run,
    sqlite_only,
    stored,
)
from tests.factories import drain, png_bytes
from tests.fake_ember import FakeEmber

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


@sqlite_only
def test_it_restores_a_backup_into_a_new_data_dir_whose_scrub_is_clean(tmp_path, settings):
    made = stored(1)
    upload = stored(2, Origin.UPLOADED)
    run("backup", str(tmp_path / "backup"))
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()  # as settings leave a new data dir: an empty file

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 2 and restored.problems == []
    assert rows_in(database) == sorted([(made.sha256, "generated"), (upload.sha256, "uploaded")])
    settings.AVATARS_DATA_DIR = target
    for asset in (made, upload):
        assert originals.read(asset.sha256, asset.mime) == png_bytes(int(asset.file_name[0]))
    result = scrub.check()
    assert result.passed and result.findings == []


def test_it_refuses_to_restore_over_a_database_that_has_tables(tmp_path, settings):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    settings.AVATARS_DATA_DIR = tmp_path / "new"

    # The test database is this studio's: it has every table.
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert "already has tables: restore into a new data dir with an empty database." in out
    assert not (tmp_path / "new" / "originals").exists()


@sqlite_only
def test_it_refuses_to_restore_into_a_data_dir_that_holds_originals(tmp_path):
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    target = tmp_path / "restored"
    (target / "originals").mkdir(parents=True)
    (target / "originals" / file_of(asset).name).write_bytes(b"someone else's")

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=target / "db.sqlite3")

    assert str(refused.value) == (
        f"{target / 'originals'} already holds originals: "
        "restore into a new data dir with an empty database."
    )
    assert not (target / "db.sqlite3").exists()


def test_it_refuses_a_folder_without_a_manifest(tmp_path):
    (tmp_path / "half").mkdir()

    code, out = run("restore", str(tmp_path / "half"))

    assert code == 1
    assert "has no manifest.json: it is not a finished backup" in out


@sqlite_only
def test_it_reports_an_original_that_fails_its_hash_in_the_backup(tmp_path, monkeypatch):
    asset = stored(1)
    monkeypatch.setattr(os, "link", cross_device)
    run("backup", str(tmp_path / "backup"))
    (tmp_path / "backup" / "originals" / file_of(asset).name).write_bytes(png_bytes(9))
    target = tmp_path / "restored"

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=target / "db")

    assert restored.problems == [f"corrupt in the backup: {file_of(asset).name}"]
    assert not (target / "originals" / file_of(asset).name).exists()


# --- a damaged backup is refused before anything is placed (found by a review) ---------


def restore_into(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "restored"
    target.mkdir()
    database = target / "db.sqlite3"
    database.touch()
    return target, database


def placed(target: Path) -> list[str]:
    folder = target / "originals"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def damage_database(snapshot: Path, how: str) -> None:
    if how == "missing":
        snapshot.unlink()
    elif how == "cut short":
        data = snapshot.read_bytes()
        snapshot.write_bytes(data[: len(data) - 8192])
    elif how == "replaced":
        snapshot.write_bytes(b"\0" * snapshot.stat().st_size)


@sqlite_only
@pytest.mark.parametrize("how", ["missing", "cut short", "replaced"])
def test_it_refuses_a_backup_whose_database_is_damaged_and_places_nothing(tmp_path, how):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    snapshot = tmp_path / "backup" / "db.sqlite3"
    damage_database(snapshot, how)
    target, database = restore_into(tmp_path)
    before = sorted(os.listdir(tmp_path / "backup"))

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert "Nothing was restored" in str(refused.value) or "is missing" in str(refused.value)
    assert placed(target) == []
    assert database.stat().st_size == 0
    assert sorted(os.listdir(tmp_path / "backup")) == before  # the backup was not written


@sqlite_only
def test_it_refuses_an_unreadable_database_a_manifest_did_not_record(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    del listed["database_sha256"], listed["database_size"]
    listed["format"] = 1  # as an older backup's: it recorded neither
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    (tmp_path / "backup" / "db.sqlite3").write_bytes(b"not a database at all" * 100)
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert "is not a readable SQLite database" in str(refused.value)
    assert placed(target) == []


@sqlite_only
def test_it_says_which_originals_the_database_names_but_the_manifest_lost(tmp_path):
    kept, lost = stored(1), stored(2)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    listed["originals"] = [o for o in listed["originals"] if o["sha256"] == kept.sha256]
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.restored == 1
    assert restored.problems == [f"named by the database, not in the backup: {file_of(lost).name}"]


@sqlite_only
def test_a_restore_that_fails_midway_takes_back_what_it_placed_and_can_run_again(
    tmp_path, monkeypatch
):
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    fill = restoring.copy_sqlite

    def the_disk_fills_up(source: Path, target_file: Path) -> None:
        target_file.write_bytes(b"half a database")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(restoring, "copy_sqlite", the_disk_fills_up)
    with pytest.raises(OSError):
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert placed(target) == []
    assert database.stat().st_size == 0

    monkeypatch.setattr(restoring, "copy_sqlite", fill)
    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert restored.problems == [] and placed(target) == [file_of(asset).name]


# --- tasks waiting to be sent are held back (found by a review: they were paid twice) -----


@sqlite_only
def test_it_holds_back_the_images_the_backup_holds_as_waiting_to_be_sent(tmp_path, subject):
    from tests.factories import plan

    queued, preparing, running = plan(subject, candidates=3)
    [clip] = plan(subject, frames=("clip",))
    Attempt.objects.create(
        task=running, number=1, ember_job_id="job_1", submitted_at=running.created_at,
        outcome=Attempt.Outcome.ACCEPTED,
    )  # fmt: skip
    type(queued).objects.filter(pk=preparing.pk).update(
        state=TaskState.PREPARING, next_attempt_at=None
    )
    type(queued).objects.filter(pk=running.pk).update(
        state=TaskState.RUNNING, ember_job_id="job_1", submitted_at=running.created_at
    )
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    code, out = run_restore(tmp_path / "backup", target, database)

    with sqlite3.connect(database) as conn:
        states = dict(conn.execute("SELECT id, state FROM studio_task").fetchall())
        attempts = conn.execute(
            "SELECT task_id, number, outcome FROM studio_attempt ORDER BY task_id"
        ).fetchall()
    hexed = {t: str(t.pk).replace("-", "") for t in (queued, preparing, running, clip)}
    assert states[hexed[queued]] == states[hexed[preparing]] == "uncertain"
    assert states[hexed[running]] == "running"
    assert states[hexed[clip]] == "queued"  # a re-send under its key costs nothing
    assert sorted(attempts) == sorted(
        [(hexed[queued], 1, "unknown"), (hexed[preparing], 1, "unknown"),
         (hexed[running], 1, "accepted"), (hexed[clip], 1, "unknown")]
    )  # fmt: skip
    assert code == 0, out
    assert "Held back 2 image task(s)" in out


@sqlite_only
def test_a_held_back_image_of_an_old_backup_is_stamped_with_the_restores_time(tmp_path, subject):
    """Found by a review: stamped with the backup's time, a nightly backup's held-back image
    was past the poll bound at once, and the admin resubmitted it without the person's word
    while the lost install's job still ran: paid twice."""
    from tests.factories import plan

    [image] = plan(subject)
    run("backup", str(tmp_path / "backup"))
    taken = manifest(tmp_path / "backup")
    taken["created_at"] = (timezone.now() - timedelta(hours=2)).isoformat()  # last night's
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(taken))
    target, database = restore_into(tmp_path)
    before = timezone.now()

    code, out = run_restore(tmp_path / "backup", target, database)

    assert code == 0, out
    with sqlite3.connect(database) as conn:
        [(state, task_sent)] = conn.execute("SELECT state, submitted_at FROM studio_task")
        [(attempt_sent,)] = conn.execute("SELECT submitted_at FROM studio_attempt")
    assert state == "uncertain"
    for stamp in (task_sent, attempt_sent):
        sent = datetime.fromisoformat(stamp).replace(tzinfo=UTC)
        assert sent >= before - timedelta(seconds=1), f"stamped {sent}, restored at {before}"
    image.submitted_at = datetime.fromisoformat(task_sent).replace(tzinfo=UTC)
    assert not image.poll_bound_passed(), "a resubmit would need no person's word"


def test_a_held_back_image_is_resubmitted_only_with_a_persons_word_within_the_bound(subject):
    from tests.factories import plan

    [image] = plan(subject)
    with connection.cursor() as cursor:  # what the restore does to the snapshot's rows
        restoring.hold_back(cursor, marker="%s")
    held = type(image).objects.get(pk=image.pk)

    with pytest.raises(engine.ResubmitRefused, match="poll bound"):
        engine.resubmit(task=held, seen_version=held.version)
    again = engine.resubmit(task=held, seen_version=held.version, confirmed_not_received=True)

    assert again.state == TaskState.QUEUED
    assert [a.outcome for a in again.attempts.order_by("number")] == ["unknown"]


def test_a_restored_install_shows_no_worker_running_until_its_own_starts(tmp_path):
    """Noticed by a review: the lost install's last beat, a second old, said "worker
    running" in the restored install's admin for up to 15 s, with no worker started."""
    WorkerHeartbeat.objects.create(
        started_at=timezone.now(), seen_at=timezone.now(), pid=4242, host="lost-machine"
    )
    assert WorkerHeartbeat.status() == "worker running"

    with connection.cursor() as cursor:  # what the restore does to the snapshot's rows
        restoring.settle(cursor, marker="%s")

    assert WorkerHeartbeat.status() == "no worker seen yet"


@sqlite_only
def test_a_restored_database_holds_no_heartbeat_of_the_lost_worker(tmp_path):
    WorkerHeartbeat.objects.create(
        started_at=timezone.now(), seen_at=timezone.now(), pid=4242, host="lost-machine"
    )
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    code, out = run_restore(tmp_path / "backup", target, database)

    assert code == 0, out
    with sqlite3.connect(database) as conn:
        beats = conn.execute("SELECT pid, host FROM studio_workerheartbeat").fetchall()
    assert beats == [], f"the lost worker's beat came back: {beats}"


def test_a_restored_clip_the_lost_install_may_have_sent_cannot_be_cancelled(subject, ember, worker):
    """Found by a review: cancelled, its paid original would stay in Ember uncollected."""
    from tests.factories import plan

    [clip] = plan(subject, frames=("clip",))
    with connection.cursor() as cursor:  # what the restore does to the snapshot's rows
        restoring.hold_back(cursor, marker="%s")
    clip.refresh_from_db()

    with pytest.raises(engine.TooLate):
        engine.cancel_task(task=clip)

    clip.refresh_from_db()
    assert clip.state == TaskState.QUEUED  # sent again under its key by the worker
    [held] = clip.attempts.all()
    assert (held.idempotency_key, held.outcome) == (clip.idempotency_key, "unknown")
    assert held.error == restoring.HELD_CLIP_NOTE
    # Stamped when restored, not when backed up: the re-send is not "too late" at once.
    assert timezone.now() - held.submitted_at < timedelta(minutes=1)

    fake = FakeEmber(ember)
    drain(worker)  # the re-send under the key is that same attempt, now with its job
    clip.refresh_from_db()
    assert clip.state == TaskState.DONE
    assert [(a.number, a.outcome) for a in clip.attempts.all()] == [(1, "accepted")]
    assert fake.submits[0]["source_metadata"]["attempt"] == 1


def run_restore(src: Path, target: Path, database: Path) -> tuple[int, str]:
    """Restore as the command says it (its output), into `database` rather than the test's."""
    out = io.StringIO()
    restored = restoring.restore(src, data_dir=target, database=database)
    command = __import__("studio.management.commands.restore", fromlist=["Command"]).Command
    real = restoring.restore
    try:
        restoring.restore = lambda *args, **kwargs: restored  # type: ignore[assignment]
        call_command(command(), str(src), stdout=out)
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}{exc}"
    finally:
        restoring.restore = real  # type: ignore[assignment]
    return 0, out.getvalue()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.pop("database_sha256"), "records no sha256 and size for its database"),
        (lambda m: m.update(database_size="123"), "records no sha256 and size for its database"),
        (lambda m: m.pop("database"), "names no database kind"),
        (lambda m: m.update(originals={}), "lists no originals"),
    ],
    ids=["no sha256", "a size that is text", "no database kind", "originals not a list"],
)
def test_it_refuses_a_manifest_whose_shape_it_cannot_trust(tmp_path, edit, said):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    edit(listed)
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    with pytest.raises(backups.BackupError) as refused:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert said in str(refused.value)
    assert placed(target) == []


@sqlite_only
@pytest.mark.parametrize("odd", ["a folder", "a pipe", "past the cap"])
def test_it_reads_nothing_but_a_regular_file_of_at_most_the_cap_from_a_backup(
    tmp_path, settings, odd
):
    """Found by a review: a folder gave a traceback, a pipe hung, a 3 GB file was read whole."""
    asset = stored(1)
    run("backup", str(tmp_path / "backup"))
    copy = tmp_path / "backup" / "originals" / file_of(asset).name
    copy.unlink()
    if odd == "a folder":
        copy.mkdir()
    elif odd == "a pipe":
        os.mkfifo(copy)
    else:
        settings.AVATARS_MAX_IMAGE_BYTES = 100
        copy.write_bytes(file_of(asset).read_bytes())
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert restored.problems[0].startswith(f"not an original in the backup: {copy.name} (")
    assert placed(target) == []


@sqlite_only
def test_it_places_and_counts_an_original_listed_twice_once(tmp_path):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    listed["originals"] *= 2
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    assert (restored.restored, restored.problems) == (1, [])


@sqlite_only
def test_the_database_appears_only_with_its_unsent_tasks_held_back(tmp_path, monkeypatch, subject):
    """Found by a review: a restore that failed (or was killed) between filling the database
    and holding back left queued images that the worker then paid for again."""
    from tests.factories import plan

    plan(subject, candidates=2)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    hold_back = restoring.hold_back

    def fails(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(restoring, "hold_back", fails)
    with pytest.raises(sqlite3.OperationalError):
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert database.stat().st_size == 0  # never a database whose tasks were not held back
    assert not (target / restoring.MARKER).exists()

    monkeypatch.setattr(restoring, "hold_back", hold_back)
    restored = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert restored.held_back == 2


@sqlite_only
def test_a_restore_killed_before_it_finished_keeps_the_worker_off_until_run_again(
    tmp_path, settings
):
    stored(1)
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)
    restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    # As a kill just before the end leaves it: everything in place, the marker still there.
    marker = target / restoring.MARKER
    marker.write_text(f"restoring {tmp_path / 'backup'}\n")

    with pytest.raises(restoring.RestoreUnfinished) as refused:
        restoring.unfinished(target)
    assert "run the same `manage.py restore` again" in str(refused.value)
    settings.AVATARS_DATA_DIR = target
    code, out = run("run_worker", "--once")
    assert code == 1 and "has not finished" in out
    assert "running" not in out, out  # it never said it ran

    again = restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert (again.restored, again.problems) == (1, [])
    assert not marker.exists()
    other = tmp_path / "other"
    marker.write_text(f"restoring {other}\n")
    with pytest.raises(backups.BackupError) as elsewhere:
        restoring.restore(tmp_path / "backup", data_dir=target, database=database)
    assert "Another restore into this data dir has not finished" in str(elsewhere.value)


@sqlite_only
def test_a_backup_dated_ahead_of_this_clock_is_searched_for_now(tmp_path, subject):
    from tests.factories import plan

    plan(subject, candidates=1)
    run("backup", str(tmp_path / "backup"))
    listed = manifest(tmp_path / "backup")
    listed["created_at"] = "2099-01-01T00:00:00+00:00"
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps(listed))
    target, database = restore_into(tmp_path)

    restoring.restore(tmp_path / "backup", data_dir=target, database=database)

    with sqlite3.connect(database) as conn:
        [(sent,)] = conn.execute("SELECT submitted_at FROM studio_task").fetchall()
    assert sent < "2099"


def test_a_restore_the_disk_stops_says_so_in_a_sentence(tmp_path, monkeypatch):
    def the_disk_fills_up(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/originals/x.png")

    monkeypatch.setattr(restoring, "restore", the_disk_fills_up)
    code, out = run("restore", str(tmp_path / "backup"))

    assert code == 1
    assert (
        "The restore stopped: No space left on device: /data/originals/x.png. What it had "
        "placed was taken away and the database left empty: deal with the cause and run it "
        "again." in out
    )
