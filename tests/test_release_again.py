"""Asking Ember again to let go of its copy, for a task whose release it did not confirm.

Found by a review with its own Ember: a release answered 503 left the task `done` with
`protection_released` false, and nothing could ask again, so Ember kept the copy for ever.
"""

import httpx
import pytest

from studio import engine, originals
from studio.models import Asset, Task, TaskState
from tests.admin_pages import change_page, one_message_about, row_of, run_action
from tests.factories import drain, plan
from tests.fake_ember import FakeEmber

pytestmark = pytest.mark.django_db


def unconfirmed(subject, ember, worker, caplog=None) -> tuple[FakeEmber, Task]:
    """A task the worker finished while Ember answered its release with a 503."""
    fake = FakeEmber(ember)
    [task] = plan(subject)
    fake.release_route.mock(return_value=httpx.Response(503))
    drain(worker)
    task.refresh_from_db()
    assert (task.state, task.protection_released) == (TaskState.DONE, False)
    if caplog is not None:  # said in the log too, where an operator looks (a review's)
        image = Asset.objects.get(task=task).ember_image_id
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any(f"did not confirm the release of image {image}" in m for m in said), said
    fake.release_route.reset()
    fake.release_route.mock(return_value=httpx.Response(200, json={"protected": False}))
    return fake, task


def released_images(fake: FakeEmber) -> list[str]:
    return [call.request.url.path.split("/")[-2] for call in fake.release_route.calls]


def test_it_asks_again_and_keeps_ember_s_confirmation(subject, ember, worker, caplog):
    fake, task = unconfirmed(subject, ember, worker, caplog)
    image = Asset.objects.get(task=task).ember_image_id

    task = engine.release_again(task=task, client=worker.client)

    assert task.protection_released is True
    assert row_of(task).protection_released is True
    assert released_images(fake) == [image]
    assert row_of(task).state == TaskState.DONE


def test_it_keeps_it_unconfirmed_when_ember_again_gives_no_200(subject, ember, worker):
    fake, task = unconfirmed(subject, ember, worker)
    fake.release_route.mock(return_value=httpx.Response(503))

    task = engine.release_again(task=task, client=worker.client)

    assert row_of(task).protection_released is False
    assert fake.release_route.call_count == 1


GONE = {"error": {"code": "not_found", "message": "no such image"}}


@pytest.mark.parametrize(("file_status", "released"), [(404, True), (200, False), (503, False)])
def test_asking_again_about_an_image_ember_removed_since_confirms_it(
    subject, ember, worker, file_status, released
):
    """Found by a kill review: Ember applied the release, the answer was lost, and its
    retention removed the image; every later ask got 404, and the task's "unconfirmed"
    (and the alert counting it) could never be cleared. A 404 is believed only when the
    image's file route answers 404 too."""
    fake, task = unconfirmed(subject, ember, worker)
    fake.release_route.mock(return_value=httpx.Response(404, json=GONE))
    fake.file_route.mock(return_value=httpx.Response(file_status, json=GONE))

    task = engine.release_again(task=task, client=worker.client)

    assert row_of(task).protection_released is released
    assert fake.release_route.call_count == 1


def test_it_never_asks_while_the_original_is_damaged(subject, ember, worker):
    fake, task = unconfirmed(subject, ember, worker)
    asset = Asset.objects.get(task=task)
    originals.path_of(asset.sha256, asset.mime).write_bytes(b"written over by hand")

    with pytest.raises(engine.ReleaseRefused) as refused:
        engine.release_again(task=task, client=worker.client)

    assert str(refused.value) == engine.RELEASE_ORIGINAL_BAD
    # Ember may have applied the release it did not confirm: no promise that it keeps its
    # copy (a review's operator was told so, and Ember's retention pass took the only one).
    assert "may already have let go" in str(refused.value)
    assert fake.release_route.call_count == 0  # what may be the only whole copy is not let go
    assert row_of(task).protection_released is False


def test_it_asks_nothing_for_a_release_already_confirmed_or_never_made(subject, ember, worker):
    fake = FakeEmber(ember)
    [confirmed] = plan(subject)
    drain(worker)
    [queued] = plan(subject)  # nothing copied yet: nothing to let go of
    assert row_of(confirmed).protection_released is True

    for task in (row_of(confirmed), row_of(queued)):
        with pytest.raises(engine.ReleaseRefused) as refused:
            engine.release_again(task=task, client=worker.client)
        assert str(refused.value) == engine.RELEASE_NOT_UNCONFIRMED
    assert fake.release_route.call_count == 1  # the worker's own, once


def test_the_admin_asks_again_from_the_tasks_page(admin_client, subject, ember, worker):
    fake, task = unconfirmed(subject, ember, worker)
    page = admin_client.get(change_page(task))
    assert 'id="repair_release_again"' in page.text

    response = run_action(admin_client, Task, "release_again", [task])

    assert row_of(task).protection_released is True
    assert "Ember confirmed" in one_message_about(response, task)
    assert fake.release_route.call_count == 1


def test_it_never_asks_while_the_original_is_only_a_link_to_its_bytes(
    subject, ember, worker, tmp_path
):
    """Found by a review: the bytes behind a link hashed right, the release went out, and
    once the linked file went the original was lost for good."""
    fake, task = unconfirmed(subject, ember, worker)
    asset = Asset.objects.get(task=task)
    path = originals.path_of(asset.sha256, asset.mime)
    elsewhere = tmp_path / "other-disk.png"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(elsewhere)

    with pytest.raises(engine.ReleaseRefused) as refused:
        engine.release_again(task=task, client=worker.client)

    assert str(refused.value) == engine.RELEASE_ORIGINAL_BAD
    assert fake.release_route.call_count == 0
