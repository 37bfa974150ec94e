"""Ask Ember again to let go of its copy, for a task whose release it did not confirm.

The worker releases once, as a task's copy ends (docs/design.md §6.7 step 4), and never
on a timer: a release with no 200 is *unconfirmed* (`protection_released` false), and
Ember keeps its protected copy. A task that went on to `done` or `history_missing` has
no next finish to ask again, so a person asks here. Only while the original is in the
archive and hashes to its name: Ember's copy may be the only whole one.
"""

from asgiref.sync import async_to_sync

from studio import originals
from studio.ember.client import EmberClient
from studio.engine.errors import RELEASE_NOT_UNCONFIRMED, RELEASE_ORIGINAL_BAD, ReleaseRefused
from studio.models import Asset, Task, TaskState
from studio.store import update

RELEASABLE = (TaskState.DONE, TaskState.HISTORY_MISSING)  # copied, and left by the worker


def release_again(*, task: Task, client: EmberClient | None = None) -> Task:
    """PATCH the protection of the task's own image again; keep the answer on the task.

    Refused (ReleaseRefused) unless the task is done or history_missing with its release
    unconfirmed, and while its original is missing or fails its checksum. The answer is
    written versioned (Conflict if the task moved meanwhile: a PATCH sent twice is
    harmless, it only says Ember may let go).
    """
    task.refresh_from_db()
    if task.state not in RELEASABLE or task.protection_released is not False:
        raise ReleaseRefused(RELEASE_NOT_UNCONFIRMED)
    asset = None if task.asset_id is None else Asset.objects.filter(pk=task.asset_id).first()
    if asset is None or not asset.ember_image_id:
        raise ReleaseRefused(RELEASE_NOT_UNCONFIRMED)
    try:
        originals.read(asset.sha256, asset.mime)  # re-hashed: never over damaged bytes
    except (OSError, ValueError, originals.ChecksumFailed):
        raise ReleaseRefused(RELEASE_ORIGINAL_BAD) from None
    released = async_to_sync(_release)(asset.ember_image_id, client)
    return update(task, expected=task.version, protection_released=released)


async def _release(image_id: str, client: EmberClient | None) -> bool:
    """Ask Ember to let go of `image_id`; True on its 200, or once it no longer has the
    image at all (`EmberClient.let_go`; the client never raises)."""
    if client is not None:
        return await client.let_go(image_id)
    own = EmberClient()
    try:
        return await own.let_go(image_id)
    finally:
        await own.aclose()
