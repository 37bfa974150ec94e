"""The admin's lists and pages: each renders, finds tasks, keeps worker-owned fields read-only."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from studio.models import ApiToken, Attempt, HistorySearch, Task, TaskState, WorkerHeartbeat
from studio.store import move
from tests.admin_pages import change_page, changelist, form_of, row_of, text
from tests.factories import a_set, ember_result, plan, stored_asset, uncertain

pytestmark = pytest.mark.django_db


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

    assert "No worker seen yet" in text(page)


def test_it_says_on_the_admin_index_that_the_worker_is_running(admin_client):
    now = timezone.now()
    WorkerHeartbeat.objects.create(started_at=now, seen_at=now, pid=42, host="box")

    page = admin_client.get(reverse("admin:index"))

    assert "Worker running" in text(page)


def test_it_says_since_when_no_worker_was_seen_so_a_person_knows_why_tasks_wait(
    admin_client, subject
):
    seen = timezone.now() - timedelta(minutes=10)
    WorkerHeartbeat.objects.create(started_at=seen, seen_at=seen, pid=42, host="box")
    plan(subject)

    index = admin_client.get(reverse("admin:index"))
    tasks = admin_client.get(changelist(Task))

    expected = f"No worker seen for 10\xa0minutes (since {seen:%Y-%m-%d %H:%M:%S} UTC)"
    assert expected in text(index)
    assert expected in text(tasks)


# --- finding tasks --------------------------------------------------------------------


def test_it_finds_the_tasks_with_paid_originals_left_in_ember(admin_client, subject):
    """Found by a review: 227 paid originals of resubmitted tasks were left in Ember, and no
    list flagged the tasks once they were done."""
    left, plain = plan(subject, candidates=2)
    note = (
        "Ember's history also holds another paid original of this task, still protected in "
        "Ember: job job_1, image img_1. Avatars did not copy it and does not release it."
    )
    move(left, TaskState.DONE, ember_job_id="job_2", result=ember_result(), error=note)
    move(plain, TaskState.DONE, ember_job_id="job_3", result=ember_result(), phase="Complete")

    found = admin_client.get(changelist(Task), {"left_in_ember": "yes"})

    assert {t.pk for t in found.context["cl"].result_list} == {left.pk}
    assert "Paid originals left in Ember" in text(found)


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


@pytest.mark.parametrize("result", [["img_31"], {"image": "img_31", "history": 7}])
def test_it_shows_a_saved_answer_that_is_not_the_shape_ember_sends(admin_client, subject, result):
    [task] = plan(subject)
    move(task, TaskState.HISTORY_MISSING, ember_job_id="job_31", result=result)

    page = text(admin_client.get(change_page(task)))

    assert "image id:</strong> -" in page
    assert "img_31" in page  # the answer itself, as saved


def test_it_says_how_often_the_worker_searched_embers_history_for_a_task(admin_client, subject):
    searched, never = plan(subject, candidates=2)
    for task in (searched, never):
        uncertain(task)
    at = timezone.now().replace(year=2026, month=11, day=30, hour=21, minute=5, second=9)
    HistorySearch.objects.create(task=searched, searched_at=at, searches=3)

    shown = [
        re.search(
            r"History searched by the worker:</label>\s*<div class=\"readonly\">([^<]*)<", page
        )
        for page in (text(admin_client.get(change_page(task))) for task in (searched, never))
    ]

    assert [found and found.group(1) for found in shown] == [
        "3 times, last at 2026-11-30 21:05:09 UTC",
        "never",
    ]


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
