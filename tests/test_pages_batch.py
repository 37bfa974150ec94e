"""A batch's page: its polled progress, the worker's presence, cancelling its tasks."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from studio import engine
from studio.models import Attempt, Task, TaskState, WorkerHeartbeat
from studio.phrases import MAY_HAVE_REACHED
from studio.store import move, update
from tests.factories import a_batch, a_clip_sent_once, sent_once_under_its_key, stored_asset
from tests.studio_pages import messages_of, part, text

pytestmark = pytest.mark.django_db

TOO_LATE = "This task has already been sent to Ember; the work is kept."
NOTHING_TO_CANCEL = (
    "Nothing left to cancel: the rest is with Ember, and what it makes will be kept."
)


# --- the cast -------------------------------------------------------------------------


def send_to_ember(task: Task) -> Task:
    return move(
        task,
        TaskState.RUNNING,
        ember_job_id="job_1",
        submitted_at=timezone.now(),
        phase="Waiting for Ember",
    )


# --- the batch page ------------------------------------------------------------------


def test_it_says_how_many_paid_requests_may_not_have_reached_ember(signed_in: Client, subject):
    """A review counted 13 charges in its own Ember where the page said 14: a submit whose
    answer was lost (a 500) counts as paid, since it may have been; the page says so."""
    batch = a_batch(subject, candidates=2)
    first, second = batch.tasks.order_by("ordinal")
    for task, outcome in ((first, Attempt.Outcome.ACCEPTED), (second, Attempt.Outcome.UNKNOWN)):
        Attempt.objects.create(task=task, number=1, submitted_at=timezone.now(), outcome=outcome)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Paid Ember requests: 2 (1 may not have reached Ember)" in page


def test_a_send_in_flight_counts_as_paid_and_unsure_before_its_answer(signed_in: Client, subject):
    """Found by a review (its Ember charged, then answered 5 s late, and the worker was killed
    meanwhile): the page said "Paid Ember requests: 0" while Ember had charged. A task in
    `submitting` whose send is not yet an attempt may already be paid; a clip re-sent under
    its key is the attempt it was sent as before, counted once."""
    batch = a_batch(subject, candidates=2, frames=("image", "clip"))
    image = batch.tasks.get(frame="image", ordinal=1)
    clip = batch.tasks.get(frame="clip", ordinal=1)
    move(image, TaskState.SUBMITTING, submitted_at=timezone.now(), phase="Sending to Ember")
    sent_once_under_its_key(clip)
    move(clip, TaskState.SUBMITTING, submitted_at=timezone.now(), phase="Sending to Ember")

    no_worker = text(signed_in.get(f"/batches/{batch.pk}/"))
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")
    worker_running = text(signed_in.get(f"/batches/{batch.pk}/"))

    # A send a worker is making is being sent; one a dead worker left may not have gone
    # (a re-review read "2 being sent" under "No worker seen for 16 s").
    assert "Paid Ember requests: 2 (2 may not have reached Ember)" in no_worker, no_worker
    said = "Paid Ember requests: 2 (1 being sent; 1 may not have reached Ember)"
    assert said in worker_running, worker_running
    assert engine.progress(batch=batch)["sending"] == 1


def test_a_lost_answer_whose_job_was_found_since_is_not_doubted(signed_in: Client, subject):
    """Found by a review (454 kills): a submit whose answer was lost and whose job the
    history search found since reached Ember; the page still said it may not have."""
    batch = a_batch(subject, candidates=3)
    lost, found, accepted = batch.tasks.order_by("ordinal")
    for task, outcome, job in (
        (lost, Attempt.Outcome.UNKNOWN, ""),
        (found, Attempt.Outcome.UNKNOWN, "job_found_in_history"),
        (accepted, Attempt.Outcome.ACCEPTED, "job_accepted"),
    ):
        Attempt.objects.create(
            task=task, number=1, submitted_at=timezone.now(), outcome=outcome, ember_job_id=job
        )

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Paid Ember requests: 3 (1 may not have reached Ember)" in page, page


def test_a_row_does_not_say_the_same_thing_twice_while_ember_is_down(signed_in: Client, subject):
    """Found by a review in a browser: "Ember could not be reached; still polling Ember
    could not be reached." The phase says it; the error, the same words, is left out."""
    batch = a_batch(subject)
    task = send_to_ember(batch.tasks.get())
    update(
        task, phase="Ember could not be reached; still polling", error="Ember could not be reached."
    )

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert page.count("Ember could not be reached") == 1, page


def test_it_shows_progress_states_and_paid_requests_in_the_partial(signed_in: Client, subject):
    batch = a_batch(subject, candidates=4)
    first, second, third, _fourth = batch.tasks.order_by("ordinal")
    asset = stored_asset(5)
    move(first, TaskState.DONE, phase="Complete", asset=asset)
    send_to_ember(second)
    move(third, TaskState.FAILED, phase="Failed", error="Ember said no.")
    for task in (first, second, third):
        Attempt.objects.create(
            task=task, number=1, submitted_at=timezone.now(), outcome=Attempt.Outcome.ACCEPTED
        )

    response = signed_in.get(f"/batches/{batch.pk}/progress/", HTTP_HX_REQUEST="true")

    page = text(response)
    body = response.content.decode()
    assert "1 ready · 2 in progress · 1 failed" in page
    assert "Paid Ember requests: 3" in page
    assert [m for m in re.findall(r'data-state="(\w+)"', body)] == [
        "done",
        "running",
        "failed",
        "queued",
    ]
    assert "Waiting for Ember" in page and "Ember said no." in page
    assert f'src="/assets/{asset.pk}/thumb/128/v3/"' in body
    assert body.count("/thumb/") == 1
    assert 'hx-trigger="every 2s"' in body  # still polling: two tasks are not finished
    assert "<html" not in body  # a partial, not a page


def test_it_stops_polling_once_every_task_has_finished(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    for task in batch.tasks.all():
        move(task, TaskState.DONE, phase="Complete")

    body = signed_in.get(f"/batches/{batch.pk}/progress/").content.decode()

    assert "2 ready" in body and "All done" in body
    assert "hx-trigger" not in body
    assert "Cancel batch" not in body


def test_it_offers_cancel_batch_only_while_a_task_has_not_reached_ember(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    first, second = batch.tasks.order_by("ordinal")
    page = f"/batches/{batch.pk}/"
    assert "Cancel batch" in signed_in.get(page).content.decode()

    send_to_ember(first)
    assert "Cancel batch" in signed_in.get(page).content.decode()  # the second is queued

    send_to_ember(second)
    body = signed_in.get(page).content.decode()
    assert "Cancel batch" not in body
    assert NOTHING_TO_CANCEL in text(signed_in.get(page))
    assert '"cancel": "kept"' in body  # what the polls say the page shows


def test_it_offers_no_cancel_for_a_clip_waiting_to_be_sent_again_under_its_key(
    signed_in: Client, subject
):
    """Found by a review: queued, but sent once under its key, the clip cannot be cancelled,
    and "Cancel batch" only ever answered "Cancelled 0 tasks; kept 1 already with Ember"."""
    clip = a_clip_sent_once(subject)

    page = signed_in.get(f"/batches/{clip.batch_id}/")

    body = page.content.decode()
    assert "Cancel batch" not in body
    assert f"/tasks/{clip.pk}/cancel/" not in body
    assert NOTHING_TO_CANCEL in text(page)


def test_it_swaps_the_cancel_area_only_when_what_it_offers_changed(signed_in: Client, subject):
    batch = a_batch(subject, candidates=1)
    send_to_ember(batch.tasks.get())
    poll = f"/batches/{batch.pk}/progress/"

    moved = signed_in.get(poll, {"cancel": "cancel"}, HTTP_HX_REQUEST="true").content.decode()
    same = signed_in.get(poll, {"cancel": "kept"}, HTTP_HX_REQUEST="true").content.decode()

    # Its place is kept as what it offers changes: the button's going had moved the results
    # below it up (a browser review's layout shift).
    assert 'id="batch-cancel" class="held" hx-swap-oob="true"' in moved
    assert NOTHING_TO_CANCEL in moved and "Cancel batch" not in moved
    assert 'id="batch-cancel"' not in same  # unchanged: a focused button stays put
    page = signed_in.get(f"/batches/{batch.pk}/").content.decode()
    assert 'id="batch-cancel" class="held"' in page
    move(batch.tasks.get(), TaskState.FAILED, phase="Failed", error="Ember said no.")
    finished = signed_in.get(f"/batches/{batch.pk}/").content.decode()
    assert '<div id="batch-cancel">' in finished  # nothing will come and go there


def test_it_polls_the_progress_partial_from_the_batch_page(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert f'hx-get="/batches/{batch.pk}/progress/"' in body
    assert 'hx-trigger="every 2s"' in body
    assert "/static/studio/htmx.min.js" in body


def test_it_says_whether_a_worker_is_driving_the_tasks(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    assert "No worker seen yet" in text(signed_in.get(f"/batches/{batch.pk}/"))

    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")
    assert "Worker running" in text(signed_in.get(f"/batches/{batch.pk}/"))

    WorkerHeartbeat.objects.update(seen_at=now - timedelta(minutes=5))
    shown = text(signed_in.get(f"/batches/{batch.pk}/"))
    assert re.search(
        r"No worker seen for 5\sminutes \(since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)", shown
    )

    WorkerHeartbeat.objects.update(seen_at=now - timedelta(seconds=40))
    shown = text(signed_in.get(f"/batches/{batch.pk}/"))
    assert re.search(r"No worker seen for 4\d s \(since ", shown), shown  # not "0 minutes"


def test_it_says_what_a_missing_worker_means_while_tasks_wait_for_it(signed_in: Client, subject):
    """Found by a browser review: "No worker seen for 16 s" beside "6 in progress", in
    words a family does not know, with nothing said of what it means for them."""
    batch = a_batch(subject, candidates=2)
    now = timezone.now()
    beat = WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")
    explained = "nothing here moves until it runs again"
    assert explained not in text(signed_in.get(f"/batches/{batch.pk}/"))

    WorkerHeartbeat.objects.filter(pk=beat.pk).update(seen_at=now - timedelta(seconds=20))
    assert explained in text(signed_in.get(f"/batches/{batch.pk}/"))

    batch.tasks.update(state=TaskState.CANCELLED, next_attempt_at=None)  # nothing left to do
    assert explained not in text(signed_in.get(f"/batches/{batch.pk}/"))


# --- a task waiting out a back-off ---------------------------------------------------

BUSY = "Ember is busy; will try again"


def wait_out(task: Task, seconds: float) -> Task:
    """Requeue `task` as the worker does after a busy answer, due in `seconds` (< 0: past)."""
    due = timezone.now() + timedelta(seconds=seconds)
    return move(task, TaskState.QUEUED, due=due, phase=BUSY)


def wait_span(body: str, task: Task) -> str:
    """Return the text of the task's wait hint as the markup has it, swapped alone or not."""
    found = re.search(rf'<span id="task-{task.pk}-wait"[^>]*>(.*?)</span>', body, re.S)
    assert found, f"no wait hint for task {task.pk} in {body!r}"
    return found.group(1).strip()


def test_it_says_how_long_is_left_before_a_task_is_tried_again(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    waiting, _fresh = batch.tasks.order_by("ordinal")
    wait_out(waiting, 35)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert f"{BUSY} (next try in 35 s)" in page, page
    assert page.count("next try") == 1  # a task never tried waits for no back-off


def test_a_task_the_worker_tries_again_by_itself_shows_no_retry_later_of_embers(
    signed_in: Client, subject
):
    """Found by a browser review: "Ember is busy; will try again (next try in 3 s)" read
    beside Ember's "Ember is busy; retry later.", and the same words stayed once the task was
    being sent again. Ember's words stay on the task, for the API and the admin."""
    batch = a_batch(subject, candidates=3)
    waiting, sending, refused = batch.tasks.order_by("ordinal")
    ember_said = "Ember is busy (simulated); retry later."
    Task.objects.update(error=ember_said)
    wait_out(waiting, 35)
    move(sending, TaskState.PREPARING, phase="Reading the reference photos")
    move(refused, TaskState.QUEUED, phase="Ember refused our credentials; check EMBER_TOKEN")

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert f"{BUSY} (next try in 35 s)" in page, page
    assert page.count(ember_said) == 1, page  # only beside the refusal no back-off mends
    assert Task.objects.get(pk=waiting.pk).error == ember_said


def test_a_task_that_may_have_reached_ember_tells_the_family_no_operators_step(
    signed_in: Client, subject
):
    """Found by a browser review: the family read "Check history before submitting again",
    a step only an operator can take; the row's label and next step say it in their words."""
    batch = a_batch(subject)
    error = f"{MAY_HAVE_REACHED} (Ember's answer was cut off)"
    move(batch.tasks.get(), TaskState.UNCERTAIN, phase="Reconcile before retry", error=error)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Needs an operator: Ember may have received this" in page, page
    assert "An operator checks with Ember before anything is sent again" in page, page
    assert "Check history" not in page, page
    assert Task.objects.get().error == error  # kept for the API and the admin


def test_it_names_no_figure_once_the_next_try_is_due(signed_in: Client, subject):
    batch = a_batch(subject)
    task = wait_out(batch.tasks.get(), -40)

    response = signed_in.get(f"/batches/{batch.pk}/")

    assert BUSY in text(response)
    assert wait_span(response.content.decode(), task) == ""
    assert not re.search(r"\d+ s\b", text(response))


def test_each_poll_says_the_wait_afresh_without_swapping_the_row(signed_in: Client, subject):
    """The row is swapped only when its version moves, and a wait runs down without a
    write: the poll swaps the hint alone, so a focused Cancel button stays put."""
    batch = a_batch(subject)
    task = wait_out(batch.tasks.get(), 35)
    poll = f"/batches/{batch.pk}/progress/"
    shown = {"seen": str(task.version)}

    waiting = signed_in.get(poll, shown, HTTP_HX_REQUEST="true").content.decode()
    # 40 s later, with no worker to pick it up: the task is as it was, its try overdue.
    now = timezone.now()
    Task.objects.filter(pk=task.pk).update(
        next_attempt_at=now - timedelta(seconds=5), updated_at=now - timedelta(seconds=40)
    )
    overdue = signed_in.get(poll, shown, HTTP_HX_REQUEST="true").content.decode()

    for body in (waiting, overdue):
        assert f'<tr id="task-{task.pk}"' not in body
        assert f'<span id="task-{task.pk}-wait" hx-swap-oob="true"' in body
    assert wait_span(waiting, task) == "(next try in 35 s)"
    assert wait_span(overdue, task) == ""


def test_a_poll_sends_no_wait_for_tasks_that_were_never_put_back(signed_in: Client, subject):
    # Planned tasks are due at once: a large batch's every poll would carry a span each.
    batch = a_batch(subject)
    [task] = batch.tasks.all()
    poll = f"/batches/{batch.pk}/progress/"

    body = signed_in.get(poll, {"seen": str(task.version)}, HTTP_HX_REQUEST="true")

    assert f'id="task-{task.pk}-wait"' not in body.content.decode()


def test_it_cancels_a_queued_task(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    task = batch.tasks.first()

    response = signed_in.post(f"/tasks/{task.pk}/cancel/", follow=True)

    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert response.redirect_chain[-1][0] == f"/batches/{batch.pk}/#task-{task.pk}"
    assert "Cancelled GPT Image image #1: nothing was sent to Ember." in messages_of(response)
    assert 'data-state="cancelled"' in response.content.decode()


def test_it_says_a_task_already_with_ember_is_kept_and_leaves_it_alone(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)
    task = send_to_ember(batch.tasks.first())
    version = task.version

    response = signed_in.post(f"/tasks/{task.pk}/cancel/", follow=True)

    task.refresh_from_db()
    assert task.state == TaskState.RUNNING
    assert task.version == version
    assert messages_of(response) == [TOO_LATE]
    assert TOO_LATE in text(response)


def test_it_cancels_what_it_can_in_a_batch_and_counts_what_it_kept(signed_in: Client, subject):
    batch = a_batch(subject, candidates=3)
    first, *_rest = batch.tasks.order_by("ordinal")
    send_to_ember(first)

    response = signed_in.post(f"/batches/{batch.pk}/cancel/", follow=True)

    states = sorted(batch.tasks.values_list("state", flat=True))
    assert states == ["cancelled", "cancelled", "running"]
    assert messages_of(response) == ["Cancelled 2 tasks; kept 1 already with Ember."]
    assert response.redirect_chain[-1][0] == f"/batches/{batch.pk}/#said"
    assert '<div role="status" id="said" tabindex="-1">' in response.content.decode()


def test_a_cancel_from_a_stale_tab_says_what_had_happened_already(signed_in: Client, subject):
    """Found by a review with two tabs: the second tab's cancels read as if they had done
    it ("Cancelled ... #1"), and a finished batch's as "kept 3 already with Ember"."""
    batch = a_batch(subject, candidates=3)
    first, second, third = batch.tasks.order_by("ordinal")
    signed_in.post(f"/tasks/{first.pk}/cancel/", follow=True)  # the first tab

    again = signed_in.post(f"/tasks/{first.pk}/cancel/", follow=True)  # the second, stale
    move(send_to_ember(second), TaskState.DONE)
    running = send_to_ember(third)
    whole = signed_in.post(f"/batches/{batch.pk}/cancel/", follow=True)

    assert messages_of(again) == [
        "GPT Image image #1 was already cancelled: nothing was sent to Ember."
    ]
    assert messages_of(whole) == [
        "Cancelled 0 tasks; kept 1 already with Ember; 1 was already cancelled; "
        "1 had already ended."
    ]
    running.refresh_from_db()
    assert running.state == TaskState.RUNNING


def test_it_refuses_to_cancel_by_get(signed_in: Client, subject):
    batch = a_batch(subject, candidates=2)

    opened = signed_in.get(f"/batches/{batch.pk}/cancel/")

    assert (opened.status_code, opened["Location"]) == (302, f"/batches/{batch.pk}/")
    assert not batch.tasks.filter(state=TaskState.CANCELLED).exists()


def test_it_requires_the_csrf_token_to_cancel(person: User, subject):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(person)
    batch = a_batch(subject, candidates=2)

    assert browser.post(f"/batches/{batch.pk}/cancel/").status_code == 403
    assert not batch.tasks.filter(state=TaskState.CANCELLED).exists()


def test_a_job_that_failed_at_ember_says_it_may_have_been_paid_and_what_to_do(
    signed_in: Client, subject
):
    """Found by a browser review: "Failed — The prompt was refused by the provider", no
    word that Ember charged for it (it had) nor of what a person may do."""
    batch = a_batch(subject, candidates=2)
    at_ember, refused = batch.tasks.order_by("ordinal")
    move(at_ember, TaskState.FAILED, ember_job_id="job_9", error="The prompt was refused.")
    move(refused, TaskState.FAILED, error="Ember refused the request: a bad reference.")

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    said = "Ember took this job and it failed there, so it may have been paid for."
    assert page.count(said) == 1, page  # not for the request Ember turned away
    assert "a new batch asks for it again, paid again" in page


def test_ember_turning_sends_away_is_said_above_the_rows(signed_in: Client, subject):
    """Found by a phone review: the summary said "2 in progress" under a full bar while
    Ember turned every send away; only the rows, screens below, said so."""
    batch = a_batch(subject, candidates=2)
    for task in batch.tasks.all():
        wait_out(task, 40)
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")

    said = part(signed_in.get(f"/batches/{batch.pk}/"), r'data-testid="ember-busy"[^>]*>[^<]*')

    assert "Ember is busy just now and turned requests away" in said, said
    assert "a send Ember turned away is not paid for" in said
    for task in batch.tasks.all():
        move(task, TaskState.SUBMITTING, phase="Sending to Ember")
    assert 'data-testid="ember-busy"' not in signed_in.get(f"/batches/{batch.pk}/").content.decode()


def test_ember_refusing_the_token_is_said_above_the_rows(signed_in: Client, subject):
    """Found by a re-review: only the rows, below the fold at both sizes, said to check
    EMBER_TOKEN, while the summary read "4 in progress · Worker running"."""
    batch = a_batch(subject, candidates=2)
    waiting, copying = batch.tasks.order_by("ordinal")
    later = timezone.now() + timedelta(minutes=5)
    move(waiting, TaskState.QUEUED, due=later, phase=f"{AUTH} (next try in 5 minutes)")
    move(copying, TaskState.COPYING, due=later, phase=f"{AUTH}; the copy waits for it")
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=1, host="here")

    said = part(signed_in.get(f"/batches/{batch.pk}/"), r'data-testid="token-refused"[^>]*>[^<]*')

    assert said.endswith(
        "Ember refused Avatars' credentials: nothing more is sent or saved until whoever runs "
        "Avatars here checks its Ember token. Nothing is lost or paid twice meanwhile."
    ), said


AUTH = "Ember refused our credentials; check EMBER_TOKEN"
