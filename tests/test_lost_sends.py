"""A done task's send whose answer was lost: a reconcile names the paid original it made.

Found by a review: after an operator confirmed a resubmit of an uncertain task whose first
send had reached Ember, the task went on to `done` and the first job's paid original stayed
protected in Ember, never copied and named by nothing: the worker's history search stops
once a task leaves `uncertain`, and reconcile refused done tasks.
"""

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studio import engine
from studio.engine.lost_sends import NOTHING_YET
from studio.models import Attempt, Task, TaskState
from studio.store import move
from tests.admin_pages import change_page, changelist, form_on, one_message_about, run_action
from tests.factories import a_task, history_route, lost_send_rows, resubmitted_and_done
from tests.task_rows import row_of

pytestmark = pytest.mark.django_db


def test_a_reconcile_names_the_paid_original_of_a_lost_send_and_the_task_stays_done(subject, ember):
    task = resubmitted_and_done(subject)
    history_route(ember, task, lost_send_rows(task))
    assert engine.lost_sends(task)

    engine.reconcile(task=task)

    saved = row_of(task)
    assert (saved.state, saved.phase, saved.asset_id) == (TaskState.DONE, "Complete", task.asset_id)
    assert "another paid original of this task, still protected in Ember: job job_1, image " in (
        saved.error
    )
    assert "img_9" in saved.error and "img_1" not in saved.error
    first = saved.attempts.get(number=1)
    assert (first.ember_job_id, first.outcome) == ("job_1", Attempt.Outcome.ACCEPTED)
    assert not engine.lost_sends(saved)  # named now: not listed again
    again = engine.reconcile(task=saved)
    assert again.error == saved.error and again.version == saved.version  # nothing twice


def test_the_admin_lists_such_tasks_and_its_reconcile_says_what_ember_holds(
    admin_client, subject, ember
):
    task = resubmitted_and_done(subject)
    other = a_task(subject)  # an ordinary queued task: not listed
    history_route(ember, task, lost_send_rows(task))

    listed = admin_client.get(changelist(Task), {"left_in_ember": "lost"}).content.decode()
    assert str(task.pk) in listed and str(other.pk) not in listed

    response = run_action(admin_client, Task, "reconcile_tasks", [task])

    said = one_message_about(response, task)
    assert "done; Ember's history also holds another paid original of this task" in said, said
    shown = admin_client.get(changelist(Task), {"left_in_ember": "yes"}).content.decode()
    assert str(task.pk) in shown


def test_the_command_takes_such_a_task_by_its_id_and_says_when_nothing_shows_yet(subject, ember):
    task = resubmitted_and_done(subject)
    history_route(ember, task, lost_send_rows(task)[1:])  # the first send's row not written (yet)
    out = io.StringIO()

    call_command("reconcile", str(task.pk), stdout=out)

    assert f"{task.pk} done: {NOTHING_YET}" in out.getvalue(), out.getvalue()
    assert row_of(task).state == TaskState.DONE
    assert engine.lost_sends(row_of(task))  # still to be looked for
    plain = move(a_task(subject), TaskState.CANCELLED, phase="Cancelled")
    with pytest.raises(CommandError):
        call_command("reconcile", str(plain.pk), stdout=io.StringIO())


def test_its_admin_page_offers_a_reconcile_button_that_names_what_ember_holds(
    admin_client, subject, ember
):
    task = resubmitted_and_done(subject)
    history_route(ember, task, lost_send_rows(task))
    page = admin_client.get(change_page(task))
    form = form_on(page, "repair_reconcile_tasks")  # fails when the page offers no such button
    [url] = re.findall(r'<form [^>]*action="([^"]+)"[^>]*id="repair_reconcile_tasks"', page.text)

    response = admin_client.post(url, form, follow=True)

    said = one_message_about(response, task)
    assert "done; Ember's history also holds another paid original of this task" in said, said
    named = admin_client.get(change_page(task))
    assert 'id="repair_reconcile_tasks"' not in named.text  # every send named: nothing to look for
