"""The batch pages as a family uses them: honest outcomes, plain words, progress in place."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from studio import engine
from studio.models import Batch, Subject, Task, TaskState
from studio.phrases import GONE_PHASE
from studio.store import move
from tests.factories import batch_request, stored_asset
from tests.studio_pages import text

pytestmark = pytest.mark.django_db

DASH = "\u2013"  # as the pages write it


def plan(subject: Subject, candidates: int = 2, **overrides: Any) -> Batch:
    providers = [{"provider": "openai", "candidates": candidates}]
    return engine.generate(request=batch_request(subject, providers=providers, **overrides))


def batch_of(subject: Subject, tasks: int) -> Batch:
    """Plan a batch of `tasks` images, spread over the providers eight at a time."""
    providers = [
        {"provider": key, "candidates": min(8, tasks - 8 * n)}
        for n, key in enumerate(("openai", "flux", "google"))
        if tasks > 8 * n
    ]
    return engine.generate(request=batch_request(subject, providers=providers))


def put(batch: Batch, *states: TaskState) -> list[Task]:
    """Move the batch's tasks, in order, to `states` (an image for the done ones)."""
    tasks = list(batch.tasks.order_by("provider", "frame", "ordinal"))
    for seed, (task, state) in enumerate(zip(tasks, states, strict=False)):
        asset = stored_asset(seed + 100) if state == TaskState.DONE else None
        move(task, state, phase="Moved", **({"asset": asset} if asset else {}))
    return tasks


def title_of(response: Any) -> str:
    found = re.search(r"<title>(.*?)</title>", response.content.decode(), re.S)
    assert found, "the answer has no title"
    return " ".join(found.group(1).split())


# --- 3. the Batches page -----------------------------------------------------------------


def test_it_lists_batches_newest_first_a_page_at_a_time(signed_in: Client, subject):
    now = timezone.now()
    for n in range(25):
        batch = plan(subject, candidates=1, title=f"Batch {n:02}")
        Batch.objects.filter(pk=batch.pk).update(created_at=now - timedelta(minutes=n))

    first, second = text(signed_in.get("/")), text(signed_in.get("/?page=2"))

    assert re.findall(r"Batch \d\d", first) == [f"Batch {n:02}" for n in range(20)]
    assert re.findall(r"Batch \d\d", second) == [f"Batch {n:02}" for n in range(20, 25)]
    assert "Older" in first and "Newer" in second and "Older" not in second


def test_it_shows_each_batchs_outcome_and_four_of_its_images(signed_in: Client, subject):
    batch = plan(subject, candidates=6)
    tasks = put(batch, *[TaskState.DONE] * 5, TaskState.FAILED)

    response = signed_in.get("/")

    assert "5 ready · 1 failed" in text(response)
    shown = re.findall(r'src="/assets/(\d+)/thumb/128/v3/"', response.content.decode())
    tasks = [Task.objects.get(pk=t.pk) for t in tasks]
    assert shown == [str(t.asset_id) for t in tasks[:4]]
    # They lead to the batch for a pointer (a review's clicks did nothing), out of a
    # keyboard's and a screen reader's way: the batch's title is their link.
    link = re.search(
        r'<a href="([^"]+)" class="thumbs-link" tabindex="-1" aria-hidden="true"',
        (response.content.decode()),
    )
    assert link is not None and link.group(1) == f"/batches/{batch.pk}/"


def test_it_says_the_time_a_batch_was_started_is_utc(signed_in: Client, subject):
    batch = plan(subject, candidates=1)
    Batch.objects.filter(pk=batch.pk).update(created_at=datetime(2025, 3, 4, 5, 6, tzinfo=UTC))

    assert "2025-03-04 05:06 UTC" in text(signed_in.get("/"))


# --- 4. honest progress --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "words", "title"),
    [
        ([TaskState.DONE] * 2 + [TaskState.CANCELLED] * 22, "2 ready · 22 cancelled", "All done"),
        # Noticed by a review: a batch cancelled whole said "All done" in its tab.
        ([TaskState.CANCELLED] * 3, "3 cancelled", "None ready"),
        ([TaskState.FAILED, TaskState.CANCELLED], "1 failed · 1 cancelled", "None ready"),
        (
            [TaskState.DONE] * 3 + [TaskState.FAILED] + [TaskState.QUEUED] * 4,
            "3 ready · 4 in progress · 1 failed",
            "3 of 8 ready",
        ),
        (
            [TaskState.UNCERTAIN] * 2,
            "2 need attention",
            # Found by a review: "0 of 2 ready" for as long as nobody repaired them.
            "0 of 2 ready, 2 need attention",
        ),
        (
            # Found by a review: saved images whose history is missing were counted among
            # "need attention" only, "0 of 7 ready, 7 need attention" beside five results.
            [TaskState.HISTORY_MISSING] * 5 + [TaskState.UNCERTAIN] * 2,
            "5 saved, waiting for Ember's record · 2 need attention",
            "0 of 7 ready, 5 saved, 2 need attention",
        ),
        (
            [TaskState.DONE, TaskState.HISTORY_MISSING],
            "1 ready · 1 saved, waiting for Ember's record",
            "1 of 2 ready, 1 saved",
        ),
        (
            [TaskState.DONE, TaskState.UNCERTAIN, TaskState.QUEUED],
            "1 ready · 1 in progress · 1 needs attention",
            "1 of 3 ready",
        ),
        (
            [TaskState.DONE, TaskState.UNCERTAIN, TaskState.FAILED],
            "1 ready · 1 needs attention · 1 failed",
            "1 of 3 ready, 1 needs attention",
        ),
    ],
)
def test_it_says_what_came_of_a_batch_in_words_on_both_pages(
    signed_in: Client, subject, states: list[TaskState], words: str, title: str
):
    batch = batch_of(subject, len(states))
    put(batch, *states)

    page = signed_in.get(f"/batches/{batch.pk}/")
    home = signed_in.get("/")

    assert words in text(page)
    assert words in text(home)
    assert title_of(page) == f"{title} {DASH} Spring avatars · Avatars"
    assert "finished" not in text(page)


def test_it_keeps_green_for_ready_images(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.CANCELLED, TaskState.FAILED)

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert "seg-ready" not in body
    assert 'class="segment seg-cancelled"' in body and 'class="segment seg-failed"' in body


def test_it_puts_progress_in_the_tab_title_as_it_polls(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE)

    polled = signed_in.get(f"/batches/{batch.pk}/progress/", HTTP_HX_REQUEST="true")

    assert title_of(polled) == f"1 of 2 ready {DASH} Spring avatars · Avatars"


# --- 5. stuck tasks --------------------------------------------------------------------------


def stuck_batch(subject: Subject) -> Batch:
    batch = plan(subject, candidates=4)
    tasks = list(batch.tasks.order_by("ordinal"))
    move(
        tasks[0],
        TaskState.UNCERTAIN,
        phase="Reconcile before retry",
        error="Ember may have received it (The connection to Ember failed after sending "
        "(RemoteProtocolError).)",
    )
    move(tasks[1], TaskState.HISTORY_MISSING, phase="Reconcile before retry")
    move(tasks[2], TaskState.COPY_FAILED, phase="Copy failed")
    return batch


def test_it_says_stuck_tasks_in_plain_words_with_what_happens_next(signed_in: Client, subject):
    batch = stuck_batch(subject)

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert "Needs an operator: Ember may have received this" in page
    assert "Image saved, waiting for Ember's record" in page
    assert "Made by Ember, not saved here yet" in page
    assert "An operator checks with Ember before anything is sent again" in page
    assert "1 saved, waiting for Ember's record · 1 in progress · 2 need attention" in page
    assert "3 images need an operator" in page
    for engineers in ("history_missing", "uncertain", "copy_failed", "Reconcile before retry"):
        assert engineers not in page
    assert "RemoteProtocolError" not in page
    assert "The connection to Ember failed after sending" in page  # the reason stays
    assert "Repair in admin" not in page  # not staff


def test_it_says_a_copy_ember_no_longer_has_cannot_be_made_without_paying_again(
    signed_in: Client, subject
):
    """Noticed by a review: a task whose image Ember had deleted promised that an
    operator would copy it, which no reconcile can do."""
    batch = plan(subject, candidates=2)
    gone, failed = batch.tasks.order_by("ordinal")
    move(gone, TaskState.COPY_FAILED, phase=GONE_PHASE, error="Image not found.")
    move(failed, TaskState.COPY_FAILED, phase="The copy from Ember failed; reconcile to retry")

    page = text(signed_in.get(f"/batches/{batch.pk}/"))

    assert page.count("Made by Ember, not saved here yet") == 2
    assert page.count("An operator copies the finished image from Ember") == 1, page
    assert "Ember says it no longer has this image, so it cannot be saved here" in page
    assert "a new batch would make another, paid again" in page
    assert "Image not found." in page  # Ember's own words stay


def test_it_links_staff_to_the_admin_list_of_this_batchs_stuck_tasks(
    signed_in: Client, subject, person
):
    batch = stuck_batch(subject)
    plan(subject, candidates=1)  # another batch's tasks stay out of the list
    person.is_staff = person.is_superuser = True
    person.save()

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()
    link = re.search(r'<a [^>]*href="([^"]+)"[^>]*>Repair in admin</a>', body)

    assert link, "no repair link for staff"
    listed = signed_in.get(link.group(1).replace("&amp;", "&"))
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 3
    assert {t.state for t in listed.context["cl"].result_list} == {
        "uncertain",
        "history_missing",
        "copy_failed",
    }


def test_it_offers_cancel_only_on_tasks_that_can_still_be_cancelled(signed_in: Client, subject):
    batch = stuck_batch(subject)  # three stuck, one queued

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert body.count(">Cancel</button>") == 1
    queued = batch.tasks.get(state=TaskState.QUEUED)
    assert f'action="/tasks/{queued.pk}/cancel/"' in body


def test_it_offers_no_cancel_beside_a_task_ember_is_making(signed_in: Client, subject):
    """Found by a review in Chromium: "Cancel" beside "Ember is making it" only ever
    answered "This task has already been sent to Ember; the work is kept."."""
    batch = plan(subject, candidates=3)
    running, copying, queued = batch.tasks.order_by("ordinal")
    move(running, TaskState.RUNNING, phase="Ember is generating")
    move(copying, TaskState.COPYING, phase="Copying")

    body = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert body.count(">Cancel</button>") == 1
    assert f'action="/tasks/{queued.pk}/cancel/"' in body
    assert "Ember is making it" in text(signed_in.get(f"/batches/{batch.pk}/"))


# --- 10. live progress that keeps focus --------------------------------------------------------


def seen_of(response: Any) -> str:
    found = re.search(r"hx-vals='(\{[^']*\})'", response.content.decode())
    assert found, "the summary does not poll"
    return found.group(1)


def test_it_sends_only_the_rows_that_changed_since_the_last_look(signed_in: Client, subject):
    batch = plan(subject, candidates=3)
    page = signed_in.get(f"/batches/{batch.pk}/")
    vals = re.search(r'"seen": "([\d.]*)", "delivered": "(\d+)", "places": "(\d+)"', seen_of(page))
    assert vals
    seen, delivered, places = vals.groups()
    moved = batch.tasks.order_by("ordinal")[1]
    move(moved, TaskState.RUNNING, ember_job_id="job_1", submitted_at=timezone.now())

    polled = signed_in.get(
        f"/batches/{batch.pk}/progress/",
        {"seen": seen, "delivered": delivered, "places": places},
        HTTP_HX_REQUEST="true",
    )

    body = polled.content.decode()
    swapped = re.findall(r'<tr id="task-([0-9a-f-]+)"[^>]*hx-swap-oob="true"', body)
    assert swapped == [str(moved.pk)]
    assert "HX-Trigger" not in polled  # no new image
    assert 'id="progress-summary"' in body


def test_it_tells_the_results_to_reload_when_an_image_arrives(signed_in: Client, subject):
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE)

    same = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "1", "places": "2"})
    more = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "0", "places": "2"})

    assert "HX-Trigger" not in same
    assert more["HX-Trigger"] == "results-changed"


@pytest.mark.parametrize("last", [TaskState.FAILED, TaskState.CANCELLED])
def test_it_tells_the_results_to_reload_when_the_batch_ends_with_no_new_image(
    signed_in: Client, subject, last
):
    """Found by a review: a batch whose last task failed said "All done", but its results
    offered "Choose favourites" only after a reload."""
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE, last)

    polled = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "1"})
    results = signed_in.get(f"/batches/{batch.pk}/results/")

    assert polled["HX-Trigger"] == "results-changed"
    assert "Choose favourites" in results.content.decode()


def test_it_tells_the_results_to_reload_when_a_saved_image_waits_for_embers_record(
    signed_in: Client, subject
):
    # The image is in the store and in the results section before Ember's history row is.
    batch = plan(subject, candidates=1)
    [task] = put(batch, TaskState.DONE)
    move(task, TaskState.HISTORY_MISSING, phase="Waiting for Ember's record")

    polled = signed_in.get(f"/batches/{batch.pk}/progress/", {"delivered": "0"})
    results = signed_in.get(f"/batches/{batch.pk}/results/")

    assert polled["HX-Trigger"] == "results-changed"
    assert 'data-delivered="1"' in results.content.decode()


# --- 11. provider labels -------------------------------------------------------------------------


def test_it_names_providers_by_label_on_the_batch_pages(signed_in: Client, subject):
    batch = engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "flux", "candidates": 1},
                {"provider": "google", "candidates": 1},
            ],
        )
    )

    pages = [
        text(signed_in.get(url))
        for url in ("/", f"/batches/{batch.pk}/", f"/batches/{batch.pk}/progress/", "/batches/new/")
    ]

    for page in pages:
        for key in ("openai", "google", "flux "):
            assert key not in page
    assert "FLUX" in pages[1] and "Imagen" in pages[1]


def test_without_script_a_batch_page_reloads_while_the_batch_goes_on(signed_in: Client, subject):
    """Found by a review: without JavaScript the page said "3 in progress" long after the
    jobs were done, and did not say that only a reload would tell."""
    batch = plan(subject, candidates=2)
    put(batch, TaskState.DONE)

    going = signed_in.get(f"/batches/{batch.pk}/").content.decode()
    put(batch, TaskState.DONE, TaskState.DONE)
    ended = signed_in.get(f"/batches/{batch.pk}/").content.decode()

    assert '<noscript><meta http-equiv="refresh" content="10"></noscript>' in going
    assert "This page reloads every 10 seconds while the batch goes on." in going
    assert 'http-equiv="refresh"' not in ended and "reloads every" not in ended
