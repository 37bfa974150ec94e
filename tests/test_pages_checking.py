"""An image whose submit's answer was lost, as the batch page tells the family about it.

Found by a browser review: the worker killed mid-submit, the page said "2 images need an
operator" with "Repair in admin" (where a resubmit that may pay twice waits behind a tick
box) for tasks the worker's own search of Ember's history adopted five minutes later,
paying nothing again. While the worker looks them up by itself (engine/adoption.py), the
page says so and that there is nothing to do; once a search leaves the decision to a
person, or when the searches are off, it says a person is needed.
"""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from studio.models import Attempt, Batch, Task, TaskState
from studio.phrases import MAY_HAVE_REACHED, NO_ROW_LATE_PHASE, NO_ROW_PHASE, RECONCILE_PHASE
from studio.store import move
from tests.factories import a_batch, stored_asset
from tests.studio_pages import text

pytestmark = pytest.mark.django_db

NOTHING_TO_DO = (
    "1 image may have reached Ember: Avatars checks Ember's history for it by itself, so "
    "nothing is paid twice. Nothing to do yet."
)


def lost_answer(task: Task, *, sent_ago: float = 10, phase: str = RECONCILE_PHASE) -> Task:
    """Leave `task` as the worker does when a submit's answer was lost: uncertain, with an
    attempt of unknown outcome and no job id."""
    sent = timezone.now() - timedelta(seconds=sent_ago)
    Attempt.objects.create(task=task, number=1, submitted_at=sent, outcome=Attempt.Outcome.UNKNOWN)
    return move(task, TaskState.UNCERTAIN, phase=phase, error=f"{MAY_HAVE_REACHED} (cut off)")


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(User.objects.create_user("op", password="x" * 12, is_staff=True))
    return client


def one_lost(subject) -> Batch:
    batch = a_batch(subject, candidates=2)
    lost_answer(batch.tasks.get(ordinal=1))
    return batch


def test_a_lost_answer_the_worker_looks_up_by_itself_asks_nothing_of_anyone(staff, subject):
    batch = one_lost(subject)

    page = text(staff.get(f"/batches/{batch.pk}/"))

    assert NOTHING_TO_DO in page, page
    assert "Checking with Ember: it may have received this" in page
    assert "Avatars looks in Ember's history for it by itself, every 5 minutes:" in page, page
    assert "1 in progress · 1 being checked with Ember" in page
    for operators in ("needs an operator", "Needs an operator", "Repair in admin"):
        assert operators not in page, page


def test_a_search_that_found_no_row_yet_still_asks_nothing_of_anyone(signed_in, subject):
    batch = a_batch(subject)
    lost_answer(batch.tasks.get(), sent_ago=400, phase=NO_ROW_PHASE)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Checking with Ember: it may have received this" in page, page
    assert "0 of 1 ready, 1 being checked with Ember" in page  # the tab's title


def test_once_a_search_leaves_it_to_a_person_the_page_says_so(staff, subject):
    batch = a_batch(subject)
    lost_answer(batch.tasks.get(), sent_ago=2000, phase=NO_ROW_LATE_PHASE)

    page = text(staff.get(f"/batches/{batch.pk}/"))

    assert "1 image needs an operator" in page and "Repair in admin" in page
    assert "Needs an operator: Ember may have received this" in page
    assert "1 being checked with Ember" not in page  # the summary's count


def test_with_the_searches_off_a_person_is_asked_at_once(staff, subject, settings):
    settings.AVATARS_ADOPT_PER_MINUTE = 0
    batch = one_lost(subject)

    page = text(staff.get(f"/batches/{batch.pk}/"))

    assert "1 image needs an operator" in page
    assert "Checking with Ember" not in page


def test_a_task_found_in_ember_since_is_not_checked_again(signed_in, subject):
    batch = a_batch(subject)
    task = lost_answer(batch.tasks.get())
    Attempt.objects.filter(task=task).update(ember_job_id="job_found")

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Checking with Ember" not in page
    assert Task.objects.get().state == TaskState.UNCERTAIN


def test_with_only_checks_left_and_no_worker_the_page_says_what_that_means(signed_in, subject):
    """Found by a re-review: the worker stopped, the one task left being checked with Ember,
    and the page did not say that nothing moves until a worker runs again."""
    batch = a_batch(subject)
    lost_answer(batch.tasks.get())

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "nothing here moves until it runs again" in page, page


def places_in_results(client: Client, batch: Batch, kind: str = "coming") -> list[str]:
    """What each place in the results says: of an image that may still come (`kind`
    "coming": "On its way", "Checking…"), or of one that will not by itself ("gone")."""
    body = client.get(f"/batches/{batch.pk}/results/").content.decode()
    return re.findall(rf'<li class="tile result {kind}"[^>]*><span class="slot">([^<]*)', body)


def test_an_image_the_worker_looks_up_by_itself_keeps_its_place_and_nothing_is_chosen_yet(
    signed_in, subject
):
    """Found by a browser review: such an image had no place among the results, and
    "Choose favourites" was offered with 4 of 5 in; when the worker found it a minute later
    it came in first, and every image moved one place on. Once a search leaves it to a
    person, the next poll has the results reload (a re-review's page kept the place, and
    withheld the favourites, for good)."""
    batch = a_batch(subject, candidates=2)
    lost = lost_answer(batch.tasks.get(ordinal=1))
    made = batch.tasks.get(ordinal=2)
    move(made, TaskState.DONE, phase="Complete", asset=stored_asset(7, task=made))
    poll = f"/batches/{batch.pk}/progress/"

    assert places_in_results(signed_in, batch) == ["Checking with Ember"]
    assert "data-choosing" not in signed_in.get(f"/batches/{batch.pk}/results/").content.decode()
    quiet = signed_in.get(poll, {"delivered": "1", "places": "2"}, HTTP_HX_REQUEST="true")
    assert "HX-Trigger" not in quiet

    move(lost, TaskState.UNCERTAIN, phase=NO_ROW_LATE_PHASE)  # a person decides now
    told = signed_in.get(poll, {"delivered": "1", "places": "2"}, HTTP_HX_REQUEST="true")

    assert told["HX-Trigger"] == "results-changed"
    assert places_in_results(signed_in, batch) == []
    assert places_in_results(signed_in, batch, "gone") == ["Needs an operator"]
    assert "data-choosing" in signed_in.get(f"/batches/{batch.pk}/results/").content.decode()


def test_with_the_searches_off_an_unsure_image_is_not_said_to_be_coming(
    signed_in, subject, settings
):
    settings.AVATARS_ADOPT_PER_MINUTE = 0  # no search will find it: only a person
    batch = a_batch(subject, candidates=1)
    lost_answer(batch.tasks.get())

    assert places_in_results(signed_in, batch) == []
    assert places_in_results(signed_in, batch, "gone") == ["Needs an operator"]
