"""The admin: inspect every task, repair through the services, refuse stale edits."""

import html
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from studio import engine, originals
from studio.models import (
    ApiToken,
    Asset,
    Attempt,
    AvatarSet,
    Batch,
    ScrubReport,
    Subject,
    Task,
    TaskState,
    WorkerHeartbeat,
)
from studio.store import move, update
from tests.factories import (
    a_set,
    drain,
    ember_result,
    generated_asset,
    history_row,
    plan,
    stored_asset,
    uncertain,
)
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db

TOO_LATE = "This task has already been sent to Ember; the work is kept."
PUBLISH_REFUSED = "Ember history must be recovered before publishing generated images."
RESUBMIT_WARNING = "Resubmitting may pay for a second generation: Ember may already have this job."
TOO_EARLY = (
    "Ember may still be working on the last submit. Wait until the poll bound has passed "
    "since it was sent, or confirm that you checked Ember and it did not receive this."
)
NOT_RECEIVED = "I checked Ember and it did not receive this"
STALE_EDIT = (
    "This row changed while you were editing it (the worker moved it). Reload and try again."
)


# --- the cast -------------------------------------------------------------------------


def serve_history(ember, rows_by_task: dict[str, list[dict[str, Any]]]):
    """Answer Ember's history route with these rows per task id (none for the others)."""

    def answer(request: httpx.Request) -> httpx.Response:
        rows = rows_by_task.get(request.url.params["task_id"], [])
        return httpx.Response(200, json={"items": rows})

    return ember.get("/api/v1/history").mock(side_effect=answer)


def row_of(obj: Any) -> Any:
    return type(obj).objects.get(pk=obj.pk)


def changelist(model: type) -> str:
    return reverse(f"admin:studio_{model._meta.model_name}_changelist")


def change_page(obj: Any) -> str:
    return reverse(f"admin:studio_{obj._meta.model_name}_change", args=[obj.pk])


def run_action(client, model: type, action: str, objs: list[Any], **extra: Any):
    """Select `objs` on the changelist and run `action`; follow to the page with its messages."""
    data = {"action": action, "_selected_action": [str(o.pk) for o in objs], "index": "0"}
    data.update(extra)
    return client.post(changelist(model), data, follow=True)


def said(response) -> list[str]:
    """The messages a person sees on the page."""
    return [str(m) for m in response.context["messages"]]


def text(response) -> str:
    return html.unescape(response.content.decode())


def one_message_about(response, task: Task) -> str:
    [message] = [m for m in said(response) if m.startswith(f"Task {str(task.pk)[:8]} ")]
    return message


class _FormFields(HTMLParser):
    """Collect what a browser would submit from one form on a page."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.data: dict[str, list[str]] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        name = a.get("name", "")
        if tag == "input" and name:
            kind = a.get("type", "text")
            unchecked = kind in ("checkbox", "radio") and "checked" not in a
            if kind not in ("submit", "button", "file") and not unchecked:
                self.data.setdefault(name, []).append(a.get("value", "on"))
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = [""]
        elif tag == "select" and name:
            self._select = name
            self.data[name] = [""]
        elif tag == "option" and self._select and "selected" in a:
            self.data[self._select] = [a.get("value", "")]

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea][0] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form":
            self.inside = False


def form_on(response, form_id: str) -> dict[str, list[str]]:
    """What the form would send if a person submitted it without touching it."""
    parser = _FormFields(form_id)
    parser.feed(response.content.decode())
    assert parser.data, f"no form {form_id!r} on the page"
    return parser.data


def form_of(response, model: type) -> dict[str, list[str]]:
    """What the change form would send if a person pressed Save without touching it."""
    return form_on(response, f"{model._meta.model_name}_form")


def resubmit(client, tasks: list[Task], *, not_received: tuple[Task, ...] = ()):
    """Choose "resubmit" for `tasks`, tick the check for `not_received`, and confirm."""
    page = run_action(client, Task, "resubmit_tasks", tasks)
    form = form_on(page, "resubmit_form")
    form["not_received"] = [str(t.pk) for t in not_received]
    return client.post(changelist(Task), form, follow=True)


# --- every page renders ---------------------------------------------------------------


def test_it_renders_the_changelist_and_change_page_of_every_model(
    admin_client, admin_user, subject
):
    [task] = plan(subject)
    uncertain(task)
    asset = stored_asset(task=task)
    chosen = a_set(asset)
    WorkerHeartbeat.objects.create(
        started_at=timezone.now(), seen_at=timezone.now(), pid=42, host="box"
    )
    token = ApiToken.objects.create(user=admin_user, digest="d" * 64)
    objects = [
        task,
        task.batch,
        asset,
        chosen,
        subject,
        task.attempts.get(),
        WorkerHeartbeat.objects.get(),
        token,
    ]

    for obj in objects:
        listing = admin_client.get(changelist(type(obj)))
        page = admin_client.get(change_page(obj))

        assert listing.status_code == 200, type(obj).__name__
        assert page.status_code == 200, type(obj).__name__
    assert admin_client.get(reverse("admin:index")).status_code == 200


def test_it_offers_no_add_nor_delete_except_revoking_a_token(admin_client, admin_user, subject):
    [task] = plan(subject)
    uncertain(task)
    asset = stored_asset(task=task)
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=42, host="box")
    token = ApiToken.objects.create(user=admin_user, digest="d" * 64)
    objects = [task, task.batch, asset, a_set(asset), subject, task.attempts.get(), token]
    objects.append(WorkerHeartbeat.objects.get())

    def offers(obj: Any) -> tuple[bool, bool]:
        page = admin_client.get(change_page(obj))
        return page.context["has_add_permission"], page.context["has_delete_permission"]

    assert {type(o).__name__: offers(o) for o in objects} == {
        type(o).__name__: (False, o is token) for o in objects
    }


# --- the worker's heartbeat on the index ----------------------------------------------


def test_it_says_on_the_admin_index_when_no_worker_was_ever_seen(admin_client):
    page = admin_client.get(reverse("admin:index"))

    assert "Worker: no worker seen yet" in text(page)


def test_it_says_on_the_admin_index_that_the_worker_is_running(admin_client):
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=42, host="box")

    page = admin_client.get(reverse("admin:index"))

    assert "Worker: worker running" in text(page)


def test_it_says_since_when_no_worker_was_seen_so_a_person_knows_why_tasks_wait(
    admin_client, subject
):
    seen = timezone.now() - timedelta(minutes=10)
    WorkerHeartbeat.objects.create(started_at=seen, seen_at=seen, pid=42, host="box")
    plan(subject)

    index = admin_client.get(reverse("admin:index"))
    tasks = admin_client.get(changelist(Task))

    expected = f"Worker: no worker seen since {seen:%Y-%m-%d %H:%M:%S} UTC"
    assert expected in text(index)
    assert expected in text(tasks)


# --- finding tasks --------------------------------------------------------------------


def test_it_filters_tasks_by_the_active_and_reconcilable_groups(admin_client, subject):
    queued, running, copying, unsure, missing, broken, done = plan(subject, candidates=7)
    move(running, TaskState.RUNNING, ember_job_id="job_1")
    move(copying, TaskState.COPYING, ember_job_id="job_2", result=ember_result())
    uncertain(unsure)
    move(missing, TaskState.HISTORY_MISSING, ember_job_id="job_3", result=ember_result())
    move(broken, TaskState.COPY_FAILED, ember_job_id="job_4", result=ember_result())
    move(done, TaskState.DONE, ember_job_id="job_5", result=ember_result(), phase="Complete")

    active = admin_client.get(changelist(Task), {"state": "active"})
    reconcilable = admin_client.get(changelist(Task), {"state": "reconcilable"})
    only_done = admin_client.get(changelist(Task), {"state": "done"})

    def shown(response) -> set[Any]:
        return {t.pk for t in response.context["cl"].result_list}

    assert shown(active) == {queued.pk, running.pk, copying.pk}
    assert shown(reconcilable) == {unsure.pk, missing.pk, broken.pk}
    assert shown(only_done) == {done.pk}
    assert "ACTIVE (queued, running, copying)" in text(active)
    assert "RECONCILABLE (uncertain, history_missing, copy_failed)" in text(active)


def test_it_finds_a_task_by_its_ember_job_id_its_own_id_or_its_batch_id(admin_client, subject):
    wanted, other = plan(subject, candidates=2)
    move(wanted, TaskState.RUNNING, ember_job_id="job_4711")
    move(other, TaskState.RUNNING, ember_job_id="job_9")

    def found(term: str) -> set[Any]:
        response = admin_client.get(changelist(Task), {"q": term})
        return {t.pk for t in response.context["cl"].result_list}

    assert found("job_4711") == {wanted.pk}
    assert found(str(wanted.pk)) == {wanted.pk}
    assert found(str(wanted.pk)[:8]) == {wanted.pk}
    assert found(str(wanted.batch_id)) == {wanted.pk, other.pk}


def test_it_lists_each_tasks_attempts_and_shows_embers_saved_answer_readably(admin_client, subject):
    [task] = plan(subject)
    Attempt.objects.create(
        task=task,
        number=1,
        ember_job_id="job_31",
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.ACCEPTED,
    )
    move(
        task, TaskState.HISTORY_MISSING, ember_job_id="job_31", result=ember_result("img_31", None)
    )

    listing = admin_client.get(changelist(Task))
    page = text(admin_client.get(change_page(task)))

    assert listing.context["cl"].result_list[0].n_attempts == 1
    assert "job_31" in page  # the attempt, inline
    assert "image id:</strong> img_31" in page
    assert "history error:</strong> history write failed" in page
    assert '"history_error": "history write failed"' in page  # indented JSON, not one line


# --- worker-owned fields are read-only ------------------------------------------------


def test_it_does_not_change_worker_owned_task_fields_from_a_posted_change_form(
    admin_client, subject
):
    [task] = plan(subject)
    move(task, TaskState.RUNNING, ember_job_id="job_1", phase="Ember is generating")
    before = row_of(task)
    page = admin_client.get(change_page(task))
    form = form_of(page, Task)
    for field in ("state", "version", "ember_job_id", "result", "asset", "phase"):
        assert field not in form  # nothing to edit: shown as text only
    form.update(
        state=[TaskState.DONE],
        version=["99"],
        ember_job_id=["job_forged"],
        result=['{"image": {"id": "forged"}}'],
        phase=["Complete"],
    )

    admin_client.post(change_page(task), form, follow=True)

    after = row_of(task)
    assert (after.state, after.version, after.ember_job_id, after.result, after.phase) == (
        TaskState.RUNNING,
        before.version,
        "job_1",
        None,
        "Ember is generating",
    )


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
    assert row_of(found).attempts.get().ember_job_id == "job_7"  # the lost attempt, found
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


def test_it_says_so_when_embers_history_cannot_be_read(admin_client, subject, ember):
    [task] = plan(subject)
    uncertain(task)
    ember.get("/api/v1/history").mock(return_value=httpx.Response(503))

    response = run_action(admin_client, Task, "reconcile_tasks", [task])

    assert row_of(task).state == TaskState.UNCERTAIN
    assert "still uncertain: Ember's history could not be read" in one_message_about(response, task)


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
        f"Batch {queued.batch}: cancelled 1 task(s); kept 1 already with Ember or finished."
        in said(response)
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

    assert "will be skipped: only an uncertain task can be resubmitted" in text(confirm_page)
    assert row_of(late).state == TaskState.QUEUED
    assert row_of(early).state == TaskState.UNCERTAIN  # the check is per task
    assert row_of(queued).state == TaskState.QUEUED
    assert "queued again" in one_message_about(response, late)
    assert one_message_about(response, early).endswith(TOO_EARLY)
    assert one_message_about(response, queued).endswith(
        "Only an uncertain task can be resubmitted."
    )


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


def test_it_skips_a_resubmit_when_nothing_selected_is_uncertain(admin_client, subject):
    [task] = plan(subject)

    response = run_action(admin_client, Task, "resubmit_tasks", [task])

    assert "skipped; only an uncertain task can be resubmitted" in one_message_about(response, task)
    assert row_of(task).state == TaskState.QUEUED


# --- sets -----------------------------------------------------------------------------


def test_it_refuses_to_publish_a_set_whose_generated_image_lacks_its_history(admin_client):
    blocked = a_set(generated_asset(history_id=""), name="Blocked")
    ready = a_set(generated_asset(history_id="hist_1"), name="Ready")

    response = run_action(admin_client, AvatarSet, "publish_sets", [blocked, ready])

    assert row_of(blocked).published_at is None
    assert row_of(ready).published_at is not None
    assert f"Blocked: not published. {PUBLISH_REFUSED}" in said(response)
    assert "Ready: published." in said(response)


def test_it_shows_which_chosen_asset_blocks_publishing(admin_client):
    blocked = a_set(generated_asset(history_id=""))

    page = text(admin_client.get(change_page(blocked)))

    assert "missing (blocks publishing)" in page


# --- batches, assets, subjects --------------------------------------------------------


def test_it_shows_a_batchs_progress_by_state_and_links_its_tasks(admin_client, subject):
    queued, running, done = plan(subject, candidates=3)
    move(running, TaskState.RUNNING, ember_job_id="job_1")
    move(done, TaskState.DONE, ember_job_id="job_2", result=ember_result(), phase="Complete")

    listing = text(admin_client.get(changelist(Batch)))
    page = text(admin_client.get(change_page(queued.batch)))

    assert "queued 1 · running 1 · done 1" in listing
    assert "<tr><th>queued</th><td>1</td></tr>" in page
    assert "<tr><th>total</th><td>3</td></tr>" in page
    assert "<tr><th>finished</th><td>1</td></tr>" in page
    for task in (queued, running, done):
        assert change_page(task) in page


def test_it_previews_an_original_on_its_change_page_only(admin_client, subject, monkeypatch):
    [task] = plan(subject)
    asset = stored_asset(task=task, history_id="hist_1")
    update(task, protection_released=True)

    page = text(admin_client.get(change_page(asset)))

    assert '<img src="data:image/png;base64,' in page
    assert asset.sha256 in page
    assert "hist_1" in page and "img_1" in page
    assert "released" in page
    assert change_page(task) in page and change_page(task.batch) in page

    def no_reading(*args: Any) -> bytes:
        raise AssertionError("the changelist read an original")

    monkeypatch.setattr(originals, "read", no_reading)
    listing = admin_client.get(changelist(Asset))
    assert listing.status_code == 200
    assert "data:image" not in text(listing)


def test_it_says_so_when_an_originals_file_is_gone(admin_client, subject):
    asset = generated_asset(history_id="hist_1")  # a row whose bytes were never stored

    page = text(admin_client.get(change_page(asset)))

    assert "The original is not in the store." in page


def test_it_shows_a_subjects_reference_photos(admin_client, subject):
    reference = Asset.objects.get(subjects=subject)
    [task] = plan(subject)
    generated = generated_asset(history_id="hist_1", task=task)
    generated.subjects.add(subject)

    page = text(admin_client.get(change_page(subject)))

    assert "reference photos" in page.lower()
    assert reference.sha256 in page
    assert change_page(reference) in page
    assert page.count('<img src="data:image/png;base64,') == 1
    assert generated.sha256 not in page  # a generated image is not a reference photo


# --- versioned edits ------------------------------------------------------------------


def test_it_saves_a_persons_edit_as_a_versioned_write(admin_client, subject):
    before = row_of(subject)
    form = form_of(admin_client.get(change_page(subject)), Subject)
    form["name"] = ["Ada Lovelace"]

    response = admin_client.post(change_page(subject), form, follow=True)

    after = row_of(subject)
    assert response.status_code == 200
    assert (after.name, after.slug, after.version) == ("Ada Lovelace", "ada", before.version + 1)


def test_it_refuses_an_edit_made_while_the_worker_moved_the_row(admin_client, subject):
    [task] = plan(subject)
    asset = stored_asset(task=task, history_id="")
    form = form_of(admin_client.get(change_page(asset)), Asset)  # a person opens the page
    # The worker fills in the history id behind the open page.
    Asset.objects.filter(pk=asset.pk).update(ember_history_id="hist_9", version=F("version") + 1)
    moved = row_of(asset)
    form["label"] = ["Ada, the good one"]

    response = admin_client.post(change_page(asset), form, follow=True)

    after = row_of(asset)
    assert STALE_EDIT in said(response)
    assert (after.label, after.ember_history_id, after.version) == ("", "hist_9", moved.version)
    assert not any("was changed successfully" in m for m in said(response))


def test_it_refuses_a_stale_set_rename_and_keeps_the_published_time(admin_client):
    chosen = a_set(generated_asset(history_id="hist_1"))
    form = form_of(admin_client.get(change_page(chosen)), AvatarSet)
    engine.publish(avatar_set=chosen)  # another writer moves the row
    published = row_of(chosen)
    form["name"] = ["Renamed"]

    response = admin_client.post(change_page(chosen), form, follow=True)

    after = row_of(chosen)
    assert STALE_EDIT in said(response)
    assert (after.name, after.published_at, after.version) == (
        "Family 2026",
        published.published_at,
        published.version,
    )


# --- the last scrub of the originals on the index ------------------------------------


def test_it_says_on_the_admin_index_that_no_scrub_has_run(admin_client):
    page = admin_client.get(reverse("admin:index"))

    assert "Originals: no scrub of the originals yet: run manage.py check_originals" in text(page)


def test_it_shows_the_last_scrub_on_the_index_and_its_findings_on_its_page(admin_client, subject):
    asset = generated_asset(history_id="hist_9")  # a row whose file was never written
    with pytest.raises(CommandError):
        call_command("check_originals")
    report = ScrubReport.objects.get()

    index = text(admin_client.get(reverse("admin:index")))
    page = text(admin_client.get(reverse("admin:studio_scrubreport_change", args=[report.pk])))

    assert f"Originals: last scrub {report.finished_at:%Y-%m-%d %H:%M} UTC: " in index
    assert "1 missing" in index
    assert "missing" in page and asset.sha256[:12] in page
    assert admin_client.get(reverse("admin:studio_scrubreport_add")).status_code == 403
