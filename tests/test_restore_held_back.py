"""Restore: what the lost install may have done after its backup (docs/operations.md).

Tasks the backup holds as waiting to be sent are held back (found by a review: they
were paid twice), and the lost install's worker is forgotten.
"""

import json
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from studio import engine, holdback, restoring
from studio.models import Attempt, TaskState, WorkerHeartbeat
from studio.phrases import RECONCILE_PHASE, REFERENCE_CHANGED
from tests.backup_parts import manifest, restore_into, run, run_restore, sqlite_only
from tests.factories import drain
from tests.fake_ember import FakeEmber

# The backup reads the database through a connection of its own: rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


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
    assert "Held back 2 task(s)" in out
    # Found by the operators' review: "Resubmit those it does not find." read as "now".
    assert "Do not resubmit them before the poll bound (30 minutes) has passed" in out, out


@sqlite_only
def test_it_holds_back_a_task_that_had_failed_with_nothing_sent(tmp_path, subject):
    """Found by a review: the lost install queued such a task again after the backup and
    paid for it; restored as failed, the admin offered to queue it again, and it was paid
    twice. One Ember took a job for stays failed: nothing can have been sent again."""
    from tests.factories import plan

    never_sent, ember_failed = plan(subject, candidates=2)
    type(never_sent).objects.filter(pk=never_sent.pk).update(
        state=TaskState.FAILED, error=REFERENCE_CHANGED, next_attempt_at=None
    )
    Attempt.objects.create(
        task=ember_failed, number=1, ember_job_id="job_9", submitted_at=timezone.now(),
        outcome=Attempt.Outcome.FAILED,
    )  # fmt: skip
    type(never_sent).objects.filter(pk=ember_failed.pk).update(
        state=TaskState.FAILED, ember_job_id="job_9", next_attempt_at=None
    )
    run("backup", str(tmp_path / "backup"))
    target, database = restore_into(tmp_path)

    code, out = run_restore(tmp_path / "backup", target, database)

    with sqlite3.connect(database) as conn:
        rows = dict(conn.execute("SELECT id, state || ' ' || error FROM studio_task").fetchall())
        attempts = conn.execute("SELECT task_id, number, outcome FROM studio_attempt").fetchall()
    held, kept = (str(t.pk).replace("-", "") for t in (never_sent, ember_failed))
    assert rows[held] == f"uncertain {holdback.HELD_FAILED_ERROR}"
    assert rows[kept].startswith("failed")
    assert sorted(attempts) == sorted([(held, 1, "unknown"), (kept, 1, "failed")])
    assert code == 0, out
    assert "Held back 1 task(s)" in out


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
    assert held.error == holdback.HELD_CLIP_NOTE
    # Stamped when restored, not when backed up: the re-send is not "too late" at once.
    assert timezone.now() - held.submitted_at < timedelta(minutes=1)

    fake = FakeEmber(ember)
    drain(worker)  # the re-send under the key is that same attempt, now with its job
    clip.refresh_from_db()
    assert clip.state == TaskState.DONE
    assert [(a.number, a.outcome) for a in clip.attempts.all()] == [(1, "accepted")]
    assert fake.submits[0]["source_metadata"]["attempt"] == 1


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


def test_a_held_back_clip_does_not_say_it_is_being_looked_for(subject):
    """Noticed in a review's notes: the worker's history search takes images only, so a clip
    that had failed with nothing sent, held back `uncertain`, said "looking for it in
    Ember's history" while nothing would look. A person's reconcile does."""
    from tests.factories import plan

    [image] = plan(subject)
    [clip] = plan(subject, frames=("clip",))
    for task in (image, clip):
        type(task).objects.filter(pk=task.pk).update(
            state=TaskState.FAILED, next_attempt_at=None, error="Ember said no."
        )
    with connection.cursor() as cursor:  # what the restore does to the snapshot's rows
        restoring.hold_back(cursor, marker="%s")
    image.refresh_from_db()
    clip.refresh_from_db()

    assert (image.state, image.phase) == (TaskState.UNCERTAIN, holdback.HELD_PHASE)
    assert (clip.state, clip.phase) == (TaskState.UNCERTAIN, RECONCILE_PHASE)
    assert clip.error == image.error == holdback.HELD_FAILED_ERROR
