"""The admin's repairs, run through the services: reconcile, retry a copy, cancel, resubmit."""

from datetime import timedelta

import httpx
import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from studio.admin.repairs import RESUBMIT_AT_ONCE
from studio.engine import RESUBMIT_STALE
from studio.models import Attempt, Batch, Task, TaskState
from studio.phrases import GONE_PHASE
from studio.store import move
from tests.admin_pages import (
    NOT_RECEIVED,
    RESUBMIT_WARNING,
    TOO_EARLY,
    TOO_LATE,
    changelist,
    form_on,
    one_message_about,
    resubmit,
    row_of,
    run_action,
    said,
    serve_history,
    text,
)
from tests.factories import drain, ember_result, history_row, plan, stored_asset, uncertain
from tests.fake_ember import FakeEmber

FRAMES = ("image", "headshot", "full-body")  # 3 providers x 3 frames x 8: 72 tasks a batch

pytestmark = pytest.mark.django_db


# --- repair actions -------------------------------------------------------------------


def test_it_reconciles_each_selected_task_and_says_what_happened_to_each(
    admin_client, subject, ember
):
    found, not_found, missing, broken, queued = plan(subject, candidates=5)
    uncertain(found)
    uncertain(not_found)
    move(
        missing, TaskState.HISTORY_MISSING, ember_job_id="job_7", result=ember_result("img_7", None)
    )
    move(broken, TaskState.COPY_FAILED, ember_job_id="job_8", result=ember_result("img_8"))
    queued_version = row_of(queued).version
    history = serve_history(
        ember, {str(found.pk): [history_row(found)], str(missing.pk): [history_row(missing)]}
    )

    response = run_action(
        admin_client, Task, "reconcile_tasks", [found, not_found, missing, broken, queued]
    )

    assert response.status_code == 200
    assert row_of(found).state == TaskState.COPYING
    assert row_of(found).ember_job_id == "job_7"
    lost = row_of(found).attempts.get()
    assert (lost.ember_job_id, lost.outcome) == ("job_7", "accepted")  # the lost attempt, found
    assert row_of(not_found).state == TaskState.UNCERTAIN
    assert row_of(missing).state == TaskState.COPYING
    assert row_of(broken).state == TaskState.COPYING
    assert row_of(broken).result == ember_result("img_8")  # copied from the saved answer
    assert row_of(queued).state == TaskState.QUEUED
    assert row_of(queued).version == queued_version
    assert history.call_count == 3  # copy_failed needs no question; queued is never asked about
    assert "uncertain → copying" in one_message_about(response, found)
    assert one_message_about(response, not_found).endswith(
        "still uncertain: Ember's history has no row for this task yet."
    )
    assert "history_missing → copying" in one_message_about(response, missing)
    assert "copy_failed → copying" in one_message_about(response, broken)
    assert "skipped; a queued task is not reconcilable" in one_message_about(response, queued)
    assert "will copy the original from Ember's answer" in one_message_about(response, broken)


def test_it_says_a_saved_original_is_not_copied_again_when_its_history_is_recovered(
    admin_client, subject, ember
):
    """Found by a browser review: a history_missing task, its original saved, was said to be
    copied again; the worker only fills in its history id (docs/design.md §7)."""
    [task] = plan(subject)
    move(task, TaskState.HISTORY_MISSING, ember_job_id="job_7", result=ember_result("img_7", None))
    saved = stored_asset(7, task=task, history_id="")
    Task.objects.filter(pk=task.pk).update(asset=saved)  # as the worker's copy leaves it
    serve_history(ember, {str(task.pk): [history_row(task)]})

    response = run_action(admin_client, Task, "reconcile_tasks", [task])

    said = one_message_about(response, task)
    assert "history_missing → copying; the original is saved already" in said, said
    assert "will copy the original" not in said, said


def test_it_says_so_when_embers_history_cannot_be_read(admin_client, subject, ember):
    [task] = plan(subject)
    uncertain(task)
    ember.get("/api/v1/history").mock(return_value=httpx.Response(503))

    response = run_action(admin_client, Task, "reconcile_tasks", [task])

    assert (row_of(task).state, row_of(task).phase) == (task.state, task.phase)  # as it was
    said = one_message_about(response, task)
    assert "Ember's history could not be read: Ember answered HTTP 503." in said, said


def test_once_ember_cannot_be_asked_it_is_asked_about_none_of_the_rest(
    admin_client, subject, ember
):
    """Found by a review: with Ember hanging, each selected task waited out its deadline in
    turn (30 s a task), in one request."""
    tasks = plan(subject, candidates=3)
    for task in tasks:
        uncertain(task)
    history = ember.get("/api/v1/history").mock(return_value=httpx.Response(503))

    response = run_action(admin_client, Task, "reconcile_tasks", tasks)

    assert history.call_count == 1
    assert [row_of(task).version for task in tasks] == [row_of(task).version for task in tasks]
    assert all(row_of(task).state == TaskState.UNCERTAIN for task in tasks)
    assert (
        "Ember was not asked about the other 2 selected task(s), left as they are: reconcile "
        "them once Ember answers." in said(response)
    )


def test_many_skipped_tasks_are_said_in_one_message_a_state(admin_client, subject):
    """Found by a review: "select all" then Reconcile gave 2,906 messages, one a task."""
    queued = plan(subject, candidates=8, providers=("openai", "flux"))

    response = run_action(admin_client, Task, "reconcile_tasks", queued)

    assert said(response) == [
        "16 selected queued tasks skipped; a queued task is not reconcilable (only "
        "uncertain, history_missing, copy_failed, and done with an earlier send not looked for)."
    ]


def test_it_retries_only_the_copy_of_a_copy_failed_task(admin_client, subject, ember):
    broken, unsure = plan(subject, candidates=2)
    move(
        broken,
        TaskState.COPY_FAILED,
        ember_job_id="job_8",
        result=ember_result("img_8"),
        error="The image file could not be fetched.",
    )
    uncertain(unsure)
    history = serve_history(ember, {str(unsure.pk): [history_row(unsure)]})

    response = run_action(admin_client, Task, "retry_copy", [broken, unsure])

    row = row_of(broken)
    assert (row.state, row.result, row.ember_job_id, row.error) == (
        TaskState.COPYING,
        ember_result("img_8"),
        "job_8",
        "",
    )
    assert row.next_attempt_at is not None  # the worker picks it up and copies
    assert row_of(unsure).state == TaskState.UNCERTAIN
    assert not history.called  # a retry is not a reconcile: nothing was asked of Ember
    assert "copy_failed → copying" in one_message_about(response, broken)
    assert "only a copy_failed task's copy can be retried" in one_message_about(response, unsure)


def test_a_retried_copy_ember_said_it_no_longer_has_is_warned_of(admin_client, subject):
    """The retry is made (Ember may have the image back), but the message does not promise
    a copy: like `reconcile`'s exit code, it says the original may be lost."""
    [gone] = plan(subject)
    move(gone, TaskState.COPY_FAILED, ember_job_id="j", result=ember_result(), phase=GONE_PHASE)

    response = run_action(admin_client, Task, "retry_copy", [gone])

    assert row_of(gone).state == TaskState.COPYING
    said = one_message_about(response, gone)
    assert "the worker will copy" not in said, said
    assert (
        "copy_failed → copying, but Ember had said it no longer has this image: it is copied "
        "only if Ember has it back, or from the archive once its file is put back there "
        "(check_originals --repair --from-backup SRC, from a backup that holds it); check its "
        "image id with Ember." in said
    ), said


def test_it_cancels_what_was_not_sent_and_keeps_what_ember_has(admin_client, subject):
    queued, preparing, running = plan(subject, candidates=3)
    move(preparing, TaskState.PREPARING, phase="Checking reference photos")
    move(running, TaskState.RUNNING, ember_job_id="job_1")

    response = run_action(admin_client, Task, "cancel_tasks", [queued, preparing, running])

    assert row_of(queued).state == TaskState.CANCELLED
    assert row_of(preparing).state == TaskState.CANCELLED
    assert row_of(running).state == TaskState.RUNNING
    assert row_of(running).ember_job_id == "job_1"
    assert "cancelled; nothing was sent to Ember." in one_message_about(response, queued)
    assert "cancelled; nothing was sent to Ember." in one_message_about(response, preparing)
    assert one_message_about(response, running).endswith(TOO_LATE)


def test_it_refuses_to_cancel_a_task_once_it_was_submitted(admin_client, subject):
    [task] = plan(subject)
    move(task, TaskState.SUBMITTING, submitted_at=timezone.now(), phase="Sending to Ember")
    before = row_of(task)

    response = run_action(admin_client, Task, "cancel_tasks", [task])

    after = row_of(task)
    assert (after.state, after.version) == (TaskState.SUBMITTING, before.version)
    assert one_message_about(response, task).endswith(TOO_LATE)


def test_it_cancels_a_batch_and_reports_what_it_kept(admin_client, subject):
    queued, running = plan(subject, candidates=2)
    move(running, TaskState.RUNNING, ember_job_id="job_1")

    response = run_action(admin_client, Batch, "cancel_batches", [queued.batch])

    assert row_of(queued).state == TaskState.CANCELLED
    assert row_of(running).state == TaskState.RUNNING
    assert (
        f"Batch {queued.batch}: cancelled 1 task(s); kept 1 already with Ember; "
        "0 had already ended." in said(response)
    )


# --- resubmit: a person's decision to maybe pay twice ---------------------------------


def test_it_asks_for_confirmation_with_the_warning_before_resubmitting(admin_client, subject):
    [task] = plan(subject)
    uncertain(task)

    page = run_action(admin_client, Task, "resubmit_tasks", [task])

    assert page.templates[0].name == "admin/studio/task/resubmit_confirmation.html"
    assert RESUBMIT_WARNING in text(page)
    assert NOT_RECEIVED in text(page)
    assert "not passed yet" in text(page)
    assert row_of(task).state == TaskState.UNCERTAIN  # nothing happens before the confirmation


def test_it_refuses_a_resubmit_before_the_poll_bound_without_the_check(admin_client, subject):
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=5))
    before = row_of(task)

    response = resubmit(admin_client, [task])

    after = row_of(task)
    assert (after.state, after.version) == (TaskState.UNCERTAIN, before.version)
    assert one_message_about(response, task).endswith(TOO_EARLY)


def test_it_resubmits_early_when_the_person_checked_ember_did_not_receive_it(
    admin_client, admin_user, subject
):
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=5))

    response = resubmit(admin_client, [task], not_received=(task,))

    row = row_of(task)
    assert row.state == TaskState.QUEUED
    assert row.phase == "Resubmitted by a person"
    assert row.next_attempt_at is not None
    assert "queued again" in one_message_about(response, task)
    decision = LogEntry.objects.get(object_id=str(task.pk))  # who chose to maybe pay twice
    assert decision.user == admin_user
    assert "queued again" in decision.get_change_message()


def test_it_resubmits_without_the_check_once_the_poll_bound_has_passed(admin_client, subject):
    late, early = plan(subject, candidates=2)
    uncertain(late, sent_ago=timedelta(minutes=31))
    uncertain(early, sent_ago=timedelta(minutes=5))
    queued = plan(subject)[0]

    confirm_page = run_action(admin_client, Task, "resubmit_tasks", [late, early, queued])
    response = resubmit(admin_client, [late, early, queued])

    assert (
        "1 other selected task is not uncertain and is left as it is: only an uncertain task "
        "can be resubmitted." in text(confirm_page)
    )
    assert str(queued.pk) not in form_on(confirm_page, "resubmit_form")["_selected_action"]
    assert row_of(late).state == TaskState.QUEUED
    assert row_of(early).state == TaskState.UNCERTAIN  # the check is per task
    assert row_of(queued).state == TaskState.QUEUED
    assert "queued again" in one_message_about(response, late)
    assert one_message_about(response, early).endswith(TOO_EARLY)
    assert not [m for m in said(response) if m.startswith(f"Task {str(queued.pk)[:8]} ")]


def test_a_confirmation_of_as_many_tasks_as_it_shows_can_be_sent(admin_client, subject):
    """Found by a review: a confirmation of 2,906 rows (two fields each) could never be sent:
    Django reads at most 1,000 fields, and answered 400. It now shows at most
    RESUBMIT_AT_ONCE uncertain tasks, and refuses more in one sentence."""
    many = plan(subject, candidates=8, providers=("openai", "flux", "google"), frames=FRAMES)
    many += plan(subject, candidates=8, providers=("openai", "flux", "google"), frames=FRAMES)
    for task in many[: RESUBMIT_AT_ONCE + 1]:
        uncertain(task, sent_ago=timedelta(minutes=31))

    refused = run_action(admin_client, Task, "resubmit_tasks", many[: RESUBMIT_AT_ONCE + 1])
    assert said(refused) == [
        f"{RESUBMIT_AT_ONCE + 1} uncertain tasks were selected; resubmit at most "
        f"{RESUBMIT_AT_ONCE} at a time, each looked up in Ember first. Nothing was sent: "
        "filter the list and select fewer."
    ]
    response = resubmit(admin_client, many[1:])  # 100 uncertain and 43 queued, all selected

    assert response.status_code == 200
    again = [t for t in many[1 : RESUBMIT_AT_ONCE + 1] if row_of(t).state == TaskState.QUEUED]
    assert len(again) == RESUBMIT_AT_ONCE, f"{len(again)} of {RESUBMIT_AT_ONCE} resubmitted"
    assert row_of(many[0]).state == TaskState.UNCERTAIN


def test_it_records_a_resubmitted_task_as_a_new_attempt(admin_client, subject, ember, worker):
    fake = FakeEmber(ember)
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=31))

    resubmit(admin_client, [task])
    drain(worker)

    row = row_of(task)
    assert row.state == TaskState.DONE
    assert [(a.number, a.outcome, a.ember_job_id) for a in row.attempts.all()] == [
        (1, Attempt.Outcome.UNKNOWN, ""),
        (2, Attempt.Outcome.ACCEPTED, "job_1"),
    ]
    assert fake.submits[0]["source_metadata"]["attempt"] == 2


def test_a_confirmation_posted_again_after_its_resubmit_was_lost_pays_nothing_more(
    admin_client, subject, ember, worker
):
    """Found by a review: the replayed form paid for attempt 3 after nobody saw attempt 2."""
    fake = FakeEmber(ember)
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=5))  # attempt 1's answer was lost
    form = form_on(run_action(admin_client, Task, "resubmit_tasks", [task]), "resubmit_form")
    form["not_received"] = [str(task.pk)]
    admin_client.post(changelist(Task), form, follow=True)
    fake.lose_answers = 1  # attempt 2 reaches Ember and is paid for; its answer is lost
    drain(worker)
    assert row_of(task).state == TaskState.UNCERTAIN
    before = row_of(task)

    # The same form again: a browser's resend, a double click, a second tab.
    response = admin_client.post(changelist(Task), form, follow=True)
    drain(worker)

    after = row_of(task)
    assert (after.state, after.version) == (TaskState.UNCERTAIN, before.version)
    assert fake.charges(str(task.pk)) == 1, "Ember charged attempt 2 and nothing after it"
    assert [(a.number, a.outcome) for a in after.attempts.all()] == [
        (1, Attempt.Outcome.UNKNOWN),
        (2, Attempt.Outcome.UNKNOWN),
    ]
    assert one_message_about(response, task).endswith(RESUBMIT_STALE)


def test_a_confirmation_posted_again_does_not_undo_a_withdrawn_resubmit(admin_client, subject):
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=31))
    form = form_on(run_action(admin_client, Task, "resubmit_tasks", [task]), "resubmit_form")
    admin_client.post(changelist(Task), form, follow=True)
    run_action(admin_client, Task, "cancel_tasks", [task])  # another person withdraws it
    withdrawn = row_of(task)
    assert withdrawn.state == TaskState.UNCERTAIN

    response = admin_client.post(changelist(Task), form, follow=True)

    after = row_of(task)
    assert (after.state, after.version) == (TaskState.UNCERTAIN, withdrawn.version)
    assert one_message_about(response, task).endswith(RESUBMIT_STALE)


def test_a_second_tabs_confirmation_says_the_task_changed_since_it_was_shown(admin_client, subject):
    """Found by a review: it said "Only an uncertain task can be resubmitted.", where the
    operations guide promises that another person's action is said."""
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=31))
    first = form_on(run_action(admin_client, Task, "resubmit_tasks", [task]), "resubmit_form")
    second = form_on(run_action(admin_client, Task, "resubmit_tasks", [task]), "resubmit_form")
    admin_client.post(changelist(Task), first, follow=True)
    resubmitted = row_of(task)

    response = admin_client.post(changelist(Task), second, follow=True)

    assert (row_of(task).state, row_of(task).version) == (TaskState.QUEUED, resubmitted.version)
    assert one_message_about(response, task).endswith(RESUBMIT_STALE)


def test_a_confirmation_without_the_version_it_showed_resubmits_nothing(admin_client, subject):
    [task] = plan(subject)
    uncertain(task, sent_ago=timedelta(minutes=31))
    form = form_on(run_action(admin_client, Task, "resubmit_tasks", [task]), "resubmit_form")
    assert form[f"version-{task.pk}"] == [str(row_of(task).version)]
    del form[f"version-{task.pk}"]

    response = admin_client.post(changelist(Task), form, follow=True)

    assert row_of(task).state == TaskState.UNCERTAIN
    assert one_message_about(response, task).endswith(RESUBMIT_STALE)


def test_it_skips_a_resubmit_when_nothing_selected_is_uncertain(admin_client, subject):
    [task] = plan(subject)

    response = run_action(admin_client, Task, "resubmit_tasks", [task])

    assert "skipped; only an uncertain task can be resubmitted" in one_message_about(response, task)
    assert row_of(task).state == TaskState.QUEUED
