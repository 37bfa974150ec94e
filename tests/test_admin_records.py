"""The admin's other records: sets, batches, assets, subjects, versioned edits, the last scrub."""

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F
from django.urls import reverse

from studio import engine, originals
from studio.models import Asset, AvatarSet, Batch, ScrubReport, Subject, TaskState
from studio.store import move, update
from tests.admin_pages import change_page, changelist, form_of, row_of, said, text
from tests.factories import a_set, ember_result, generated_asset, kept_image, plan, stored_asset

pytestmark = pytest.mark.django_db

STALE_EDIT = (
    "This row changed while you were editing it (another person or the worker changed it). "
    "Reload and try again."
)


# --- sets -----------------------------------------------------------------------------


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

    # The studio's own thumbnail: the content policy refuses an image written as a data: URI.
    thumb = f"/assets/{asset.pk}/thumb/256/v3/"
    assert f'<img src="{thumb}"' in page
    assert "data:image" not in page
    answer = admin_client.get(thumb)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("image/"), answer
    assert asset.sha256 in page
    assert "hist_1" in page and "img_1" in page
    assert "released" in page
    assert change_page(task) in page and change_page(task.batch) in page

    def no_reading(*args: Any) -> bytes:
        raise AssertionError("the changelist read an original")

    monkeypatch.setattr(originals, "read", no_reading)
    listing = admin_client.get(changelist(Asset))
    assert listing.status_code == 200
    assert "/thumb/" not in text(listing)


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
    assert page.count('<img src="/assets/') == 1
    assert f'<img src="/assets/{reference.pk}/thumb/128/v3/"' in page
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
    chosen = a_set(kept_image(history_id="hist_1"))
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


def test_a_published_sets_name_cannot_be_changed_here(admin_client):
    """Found by a review: the admin renamed a published set, which sibling apps read by its
    name, and which the studio and the API refuse to rename."""
    chosen = a_set(kept_image(history_id="hist_1"))
    engine.publish(avatar_set=chosen)
    published = row_of(chosen)
    page = admin_client.get(change_page(chosen))
    form = form_of(page, AvatarSet)
    form["name"] = ["Renamed"]

    admin_client.post(change_page(chosen), form, follow=True)

    assert 'name="name"' not in page.content.decode()
    assert (row_of(chosen).name, row_of(chosen).version) == ("Family 2026", published.version)


def test_a_draft_sets_name_is_kept_as_the_studio_keeps_it(admin_client):
    draft = a_set(kept_image(history_id="hist_1"))
    form = form_of(admin_client.get(change_page(draft)), AvatarSet)
    form["name"] = ["\u200b\u200b"]  # nothing a person can see

    refused = admin_client.post(change_page(draft), form)

    assert "A set needs a name." in refused.content.decode()
    assert row_of(draft).name == "Family 2026"
    form["name"] = ["  Spring\u200b  sets "]
    admin_client.post(change_page(draft), form, follow=True)
    assert row_of(draft).name == engine.set_name("  Spring\u200b  sets ")
    assert row_of(draft).name != "  Spring\u200b  sets "


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
