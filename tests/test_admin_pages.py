"""The admin's pages as a person uses them: a task's repairs on its own page, the job in
Ember's terms, a set's items, providers by their labels."""

import html
import re
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from studio import engine
from studio.models import Asset, Attempt, Kind, Task, TaskState
from studio.store import move, update
from tests.admin_pages import (
    NOT_RECEIVED,
    RESUBMIT_WARNING,
    TOO_EARLY,
    TOO_LATE,
    change_page,
    changelist,
    form_on,
    one_message_about,
    row_of,
    said,
    serve_history,
    text,
)
from tests.factories import (
    EMBER,
    a_clip_sent_once,
    a_set,
    batch_request,
    ember_result,
    generated_asset,
    history_row,
    plan,
    stored_asset,
    uncertain,
)

pytestmark = pytest.mark.django_db

HISTORY_LOOKUP = EMBER + "/api/v1/history?source_app=cwkAvatars&task_id={}"
RESUBMIT_WITHDRAWN = (
    "The resubmit was withdrawn before it was sent. An earlier attempt may still be with "
    "Ember: reconcile before retry."
)
JOB_LOOKUP = EMBER + "/api/v1/api-generators/jobs/{}"


def buttons(page) -> set[str]:
    """The repairs a task's page offers as buttons."""
    return set(re.findall(r'<form [^>]*id="repair_(\w+)"', page.content.decode()))


def press(client, task: Task, repair: str):
    """Open the task's page and press one of its repair buttons; follow to the next page."""
    page = client.get(change_page(task))
    form = form_on(page, f"repair_{repair}")
    [url] = re.findall(rf'<form [^>]*action="([^"]+)"[^>]*id="repair_{repair}"', page.text)
    return client.post(url, form, follow=True)


class _Cells(HTMLParser):
    """Collect the text of every element carrying the class `field-<name>`, in order.

    For a field of a change page that is the value alone (its `readonly` box), not its label.
    """

    VOID = frozenset({"img", "br", "input", "hr", "meta", "link"})

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = f"field-{name}"
        self.found: list[dict[str, list[str]]] = []
        self.depth = 0  # elements open inside the current cell, 0 when outside one
        self.readonly_at = 0  # the depth of the value box open inside it, 0 when none

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        if self.depth:
            self.depth += 1
            if "readonly" in classes:
                self.readonly_at = self.depth
        elif self.name in classes:
            self.depth = 1
            self.found.append({"all": [], "readonly": []})

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID or not self.depth:
            return
        if self.depth == self.readonly_at:
            self.readonly_at = 0
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.found[-1]["all"].append(data)
            if self.readonly_at:
                self.found[-1]["readonly"].append(data)


def cells(page, column: str) -> list[str]:
    """The text of one column of a changelist or an inline, or of one field of a page."""
    parser = _Cells(column)
    parser.feed(page.content.decode())
    texts = [" ".join(c["readonly"] or c["all"]) for c in parser.found]
    return [" ".join(html.unescape(t).split()) for t in texts]


def in_state(subject, state: TaskState) -> Task:
    """A task as it rests in `state`, the way the worker or a person leaves it there."""
    [task] = plan(subject)
    if state == TaskState.UNCERTAIN:
        return uncertain(task)
    fields: dict[str, Any] = {}
    if state == TaskState.SUBMITTING:
        fields = {"submitted_at": timezone.now()}
    elif state not in (TaskState.QUEUED, TaskState.PREPARING, TaskState.CANCELLED):
        fields = {"ember_job_id": "job_1", "submitted_at": timezone.now()}
    if state in (TaskState.HISTORY_MISSING, TaskState.COPY_FAILED, TaskState.DONE):
        fields["result"] = ember_result()
    return task if state == TaskState.QUEUED else move(task, state, **fields)


# --- 1. the repairs on the task's own page ----------------------------------------------


@pytest.mark.parametrize(
    ("state", "offered"),
    [
        (TaskState.QUEUED, {"cancel_tasks"}),
        (TaskState.PREPARING, {"cancel_tasks"}),
        (TaskState.SUBMITTING, set()),
        (TaskState.RUNNING, set()),
        (TaskState.COPYING, set()),
        (TaskState.UNCERTAIN, {"reconcile_tasks", "resubmit_tasks"}),
        (TaskState.HISTORY_MISSING, {"reconcile_tasks"}),
        (TaskState.COPY_FAILED, {"reconcile_tasks", "retry_copy"}),
        (TaskState.DONE, set()),
        (TaskState.FAILED, set()),
        (TaskState.CANCELLED, set()),
    ],
)
def test_it_offers_on_a_tasks_page_only_the_repairs_its_state_allows(
    admin_client, subject, state, offered
):
    task = in_state(subject, state)

    page = admin_client.get(change_page(task))

    assert buttons(page) == offered


def test_it_offers_no_cancel_for_a_clip_ember_may_have_under_its_key(admin_client, subject):
    clip = a_clip_sent_once(subject)

    page = admin_client.get(change_page(clip))

    assert row_of(clip).state == TaskState.QUEUED
    assert buttons(page) == set()


def test_it_reconciles_a_task_from_its_page_and_comes_back_to_it(admin_client, subject, ember):
    task = in_state(subject, TaskState.UNCERTAIN)
    serve_history(ember, {str(task.pk): [history_row(task)]})

    response = press(admin_client, task, "reconcile_tasks")

    assert row_of(task).state == TaskState.COPYING
    assert response.redirect_chain[-1][0] == change_page(task)
    assert "uncertain → copying" in one_message_about(response, task)
    assert buttons(response) == set()  # copying: nothing left to repair


def test_it_retries_a_copy_from_the_tasks_page_without_asking_ember(admin_client, subject, ember):
    task = in_state(subject, TaskState.COPY_FAILED)
    history = serve_history(ember, {})

    response = press(admin_client, task, "retry_copy")

    assert row_of(task).state == TaskState.COPYING
    assert row_of(task).result == ember_result()
    assert not history.called
    assert "copy_failed → copying" in one_message_about(response, task)


def test_it_cancels_a_queued_task_from_its_page(admin_client, subject):
    task = in_state(subject, TaskState.QUEUED)

    response = press(admin_client, task, "cancel_tasks")

    assert row_of(task).state == TaskState.CANCELLED
    assert response.redirect_chain[-1][0] == change_page(task)
    assert "cancelled; nothing was sent to Ember." in one_message_about(response, task)


def test_it_says_too_late_when_the_worker_sent_the_task_after_the_page_was_opened(
    admin_client, subject
):
    task = in_state(subject, TaskState.QUEUED)
    page = admin_client.get(change_page(task))
    form = form_on(page, "repair_cancel_tasks")
    url = reverse("admin:studio_task_repair", args=[task.pk, "cancel_tasks"])
    move(task, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    response = admin_client.post(url, form, follow=True)

    assert row_of(task).state == TaskState.RUNNING
    assert one_message_about(response, task).endswith(TOO_LATE)


def test_it_names_the_withdrawn_resubmit_when_a_resubmitted_task_is_cancelled(
    admin_client, subject
):
    task = in_state(subject, TaskState.UNCERTAIN)
    move(task, TaskState.QUEUED, phase="Resubmitted by a person")

    response = press(admin_client, task, "cancel_tasks")

    assert row_of(task).state == TaskState.UNCERTAIN
    assert one_message_about(response, task).endswith(RESUBMIT_WITHDRAWN)


def test_it_resubmits_from_the_tasks_page_only_after_the_confirmation(
    admin_client, admin_user, subject
):
    task = in_state(subject, TaskState.UNCERTAIN)  # sent a minute ago: within the poll bound

    confirmation = press(admin_client, task, "resubmit_tasks")
    form = form_on(confirmation, "resubmit_form")
    form["not_received"] = [str(task.pk)]
    confirm_url = confirmation.request["PATH_INFO"]
    response = admin_client.post(confirm_url, form, follow=True)

    assert RESUBMIT_WARNING in text(confirmation)
    assert NOT_RECEIVED in text(confirmation)
    assert row_of(task).state == TaskState.QUEUED
    assert response.redirect_chain[-1][0] == change_page(task)
    assert "queued again" in one_message_about(response, task)
    assert LogEntry.objects.get(object_id=str(task.pk)).user == admin_user


def test_it_refuses_a_resubmit_from_the_tasks_page_without_the_check(admin_client, subject):
    task = in_state(subject, TaskState.UNCERTAIN)
    before = row_of(task)

    confirmation = press(admin_client, task, "resubmit_tasks")
    form = form_on(confirmation, "resubmit_form")
    response = admin_client.post(confirmation.request["PATH_INFO"], form, follow=True)

    after = row_of(task)
    assert (after.state, after.version) == (TaskState.UNCERTAIN, before.version)
    assert one_message_about(response, task).endswith(TOO_EARLY)


def test_it_offers_no_repair_to_a_person_who_may_only_look(client, subject):
    task = in_state(subject, TaskState.QUEUED)
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_task"))
    client.force_login(viewer)

    page = client.get(change_page(task))
    refused = client.post(reverse("admin:studio_task_repair", args=[task.pk, "cancel_tasks"]))

    assert page.status_code == 200
    assert buttons(page) == set()
    assert refused.status_code == 403
    assert "This account may not do that. Nothing was changed." in refused.content.decode()
    assert row_of(task).state == TaskState.QUEUED


def test_it_runs_no_repair_on_a_get_nor_under_an_unknown_name(admin_client, subject):
    task = in_state(subject, TaskState.QUEUED)

    fetched = admin_client.get(
        reverse("admin:studio_task_repair", args=[task.pk, "cancel_tasks"]), follow=True
    )
    unknown = admin_client.post(reverse("admin:studio_task_repair", args=[task.pk, "delete"]))

    # A repair's address opened (the history, a link passed on): the task's page, which says
    # where repairs run, not the studio's 405 page inside the admin (a review).
    assert fetched.redirect_chain == [(change_page(task), 302)]
    assert said(fetched) == ["Repairs run from the buttons on this page; nothing was changed."]
    assert unknown.status_code == 404
    assert row_of(task).state == TaskState.QUEUED


# --- 2. the job in Ember's terms --------------------------------------------------------


def test_it_shows_a_tasks_job_id_and_how_to_look_it_up_in_embers_history(admin_client, subject):
    task = in_state(subject, TaskState.UNCERTAIN)
    Attempt.objects.filter(task=task).update(ember_job_id="job_40")
    Attempt.objects.create(
        task=task,
        number=2,
        ember_job_id="job_41",
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.ACCEPTED,
    )
    update(task, ember_job_id="job_41")

    page = admin_client.get(change_page(task))

    [lookup] = cells(page, "ember_lookup")
    assert HISTORY_LOOKUP.format(task.pk) in lookup
    assert JOB_LOOKUP.format("job_40") in lookup
    assert JOB_LOOKUP.format("job_41") in lookup
    assert cells(page, "attempt") == ["Attempt 1", "Attempt 2"]
    assert cells(page, "ember_job_id")[-2:] == ["job_40", "job_41"]


def test_it_shows_a_clips_key_and_the_key_each_attempt_was_sent_under(admin_client, subject):
    clip = a_clip_sent_once(subject)
    first_key = clip.idempotency_key
    Attempt.objects.filter(task=clip).update(ember_job_id="job_50")
    move(clip, TaskState.UNCERTAIN, submitted_at=timezone.now() - timedelta(hours=1))
    update(clip, idempotency_key="k" * 32)  # as a resubmit gives it a new key
    Attempt.objects.create(
        task=clip,
        number=2,
        idempotency_key="k" * 32,
        ember_job_id="job_51",
        submitted_at=timezone.now(),
        outcome=Attempt.Outcome.ACCEPTED,
    )

    page = admin_client.get(change_page(clip))

    assert clip.kind == Kind.CLIP
    assert cells(page, "idempotency_key") == [first_key, "k" * 32]
    assert cells(page, "clip_key") == ["k" * 32]


def test_it_says_an_image_has_no_key_every_submit_being_a_new_job(admin_client, subject):
    task = in_state(subject, TaskState.RUNNING)

    page = admin_client.get(change_page(task))

    [key] = cells(page, "clip_key")
    assert "every submit is a new paid job" in key


# --- 3. a set's items ---------------------------------------------------------------------


def test_it_shows_a_sets_items_in_order_with_thumbnail_label_origin_and_history(
    admin_client, subject
):
    first = generated_asset(history_id="hist_a", label="Ada, smiling")
    second = Asset.objects.get(subjects=subject)  # the reference photo, uploaded
    third = generated_asset(history_id="", label="Ada, side")
    chosen = a_set(third, first, second)

    page = admin_client.get(change_page(chosen))

    thumbs = re.findall(r'<img src="([^"]+)"', page.content.decode())
    assert thumbs == [
        reverse("studio:asset-thumb", args=[a.pk, 128]) for a in (third, first, second)
    ]
    assert cells(page, "place") == ["1", "2", "3"]
    assert cells(page, "label") == ["Ada, side", "Ada, smiling", str(second)]
    assert cells(page, "origin") == ["generated", "generated", "uploaded"]
    assert cells(page, "history") == ["missing (blocks publishing)", "hist_a", "-"]


# --- 4. providers by their labels ---------------------------------------------------------


def test_it_names_providers_by_their_labels_in_the_admin_lists(admin_client, subject):
    task = in_state(subject, TaskState.DONE)
    update(stored_asset(task=task), provider="openai")
    unsure = uncertain(plan(subject)[0])

    tasks = admin_client.get(changelist(Task))
    assets = admin_client.get(changelist(Asset))
    attempts = admin_client.get(changelist(Attempt))

    def provider_choices(page) -> list[str]:
        [spec] = [s for s in page.context["cl"].filter_specs if s.title == "provider"]
        return [str(c["display"]) for c in spec.choices(page.context["cl"])][1:]

    assert provider_choices(tasks) == ["GPT Image", "FLUX", "Imagen"]
    assert provider_choices(assets) == ["GPT Image", "FLUX", "Imagen"]
    assert cells(assets, "provider_name") == ["GPT Image", "-"]  # the upload has none
    assert cells(attempts, "task_link") == [f"{str(unsure.pk)[:8]} GPT Image image #1 (uncertain)"]
    assert cells(tasks, "provider_label") == ["GPT Image", "GPT Image"]


def test_it_filters_tasks_by_provider_from_its_label(admin_client, subject):
    wanted = in_state(subject, TaskState.QUEUED)
    flux = batch_request(subject, providers=[{"provider": "flux", "candidates": 1}])
    engine.generate(request=flux)

    listing = admin_client.get(changelist(Task), {"provider": "openai"})

    assert {t.pk for t in listing.context["cl"].result_list} == {wanted.pk}


def test_it_names_a_task_by_its_providers_label_in_a_repair_message(admin_client, subject):
    task = in_state(subject, TaskState.QUEUED)

    response = press(admin_client, task, "cancel_tasks")

    assert one_message_about(response, task).startswith(f"Task {str(task.pk)[:8]} (GPT Image ")


@pytest.mark.parametrize("path", ["/admin/", "/admin/studio/task/", "/admin/login/"])
def test_every_admin_page_names_the_studios_icon(client, admin_client, path):
    """Found by a review in Chromium: each admin page's console showed a 404 for
    /favicon.ico, which the admin's own templates do not name."""
    asking = client if path == "/admin/login/" else admin_client

    body = asking.get(path).content.decode()

    assert '<link rel="icon" href="/static/studio/favicon.svg" type="image/svg+xml">' in body
